package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"svc/platform/fault"
)

// Simulator is the control API of the processor simulator (svc simulator,
// docs/simulator.md) under URL/_sim/, and of the TRON node simulator under
// TronURL/sim/ ("" when no TRON node is configured).
type Simulator struct {
	URL     string
	TronURL string
	// Probe: URL is the processor's, to be used only once GET URL/_sim/
	// answers as the simulator of StoreID (an automatic choice); false: URL
	// was configured as the simulator.
	Probe   bool
	StoreID string
	Client  *http.Client

	mu     sync.Mutex
	probed bool // Probe had its answer
	is     bool // and the answer was the simulator
}

// controlTimeout bounds one control call.
const controlTimeout = 10 * time.Second

func (s *Simulator) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	return &http.Client{Timeout: controlTimeout}
}

// Present reports whether the simulator's control API is there: always
// for a configured URL; for a probed one, once GET URL/_sim/ answered as
// the simulator of the store (an answer of another kind is kept: that
// processor is not the simulator; no answer at all is asked again next
// time).
func (s *Simulator) Present(ctx context.Context) bool {
	if s == nil {
		return false
	}
	if !s.Probe {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probed {
		return s.is
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(s.URL, "/")+"/_sim/", nil)
	if err != nil {
		return false
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var info struct {
		StoreID string `json:"storeId"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	s.probed = true
	s.is = err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(body, &info) == nil &&
		info.StoreID != "" && info.StoreID == s.StoreID
	return s.is
}

// simRefusal is the simulator's refusal of a control call: its status
// (404 unknown id, 409 a state that does not allow the action, 400 a bad
// request) and its message.
type simRefusal struct {
	Status  int
	Message string
}

func (e *simRefusal) Error() string { return fmt.Sprintf("simulator: %d: %s", e.Status, e.Message) }

// errSimUnreachable: the control call got no answer.
var errSimUnreachable = fault.New(fault.Unavailable, "the processor simulator did not answer; retry")

// control POSTs body to the simulator's control path (under URL) and
// decodes the answer into out (nil: ignored).
func (s *Simulator) control(ctx context.Context, base, path string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client().Do(req)
	if err != nil {
		return fault.Wrap(fault.Unavailable, errSimUnreachable.Message, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fault.Wrap(fault.Unavailable, errSimUnreachable.Message, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(rb, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(rb))
		}
		return &simRefusal{Status: resp.StatusCode, Message: strings.TrimPrefix(e.Error, "btcpaysim: ")}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rb, out); err != nil {
		return fmt.Errorf("simulator: %s: decode the answer: %w", path, err)
	}
	return nil
}

// Invoice acts on an invoice: action is pay, confirm or expire.
func (s *Simulator) Invoice(ctx context.Context, invoiceID, action string, body any) error {
	return s.control(ctx, s.URL, "/_sim/invoices/"+url.PathEscape(invoiceID)+"/"+action, body, nil)
}

// Payout acts on a payout: action is broadcast, complete, fail or stall.
func (s *Simulator) Payout(ctx context.Context, payoutID, action string, body any) error {
	return s.control(ctx, s.URL, "/_sim/payouts/"+url.PathEscape(payoutID)+"/"+action, body, nil)
}

// SetFeeRate sets the processor's fee-rate estimate (sat/vB, a decimal).
func (s *Simulator) SetFeeRate(ctx context.Context, rate string) error {
	return s.control(ctx, s.URL, "/_sim/feerate", map[string]json.Number{"feeRate": json.Number(rate)}, nil)
}

// ErrNoTron: no TRON node simulator is configured.
var ErrNoTron = fault.New(fault.NotFound, "not found: this deployment has no TRON node simulator (TRONGRID_URL)")

// TronTransfer adds a confirmed USDT transfer to the TRON node simulator
// and returns its transaction id.
func (s *Simulator) TronTransfer(ctx context.Context, from, to string, amount int64, txid string) (string, error) {
	if s.TronURL == "" {
		return "", ErrNoTron
	}
	var out struct {
		TxID string `json:"txid"`
	}
	body := map[string]any{"from": from, "to": to, "amount": fmt.Sprint(amount)}
	if txid != "" {
		body["txid"] = txid
	}
	if err := s.control(ctx, s.TronURL, "/sim/transfers", body, &out); err != nil {
		return "", err
	}
	return out.TxID, nil
}

// asRefusal returns the simulator's refusal in err, if it is one.
func asRefusal(err error) (*simRefusal, bool) {
	var r *simRefusal
	ok := errors.As(err, &r)
	return r, ok
}
