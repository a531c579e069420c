package btcpay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// PayoutState is BTCPay's payout state.
type PayoutState string

// Payout states.
const (
	PayoutAwaitingApproval PayoutState = "AwaitingApproval"
	PayoutAwaitingPayment  PayoutState = "AwaitingPayment"
	PayoutInProgress       PayoutState = "InProgress"
	PayoutCompleted        PayoutState = "Completed"
	PayoutCancelled        PayoutState = "Cancelled"
)

// MetadataWithdrawalID is the payout metadata key that carries our
// withdrawal id, the payout's correlation id.
const MetadataWithdrawalID = "withdrawalId"

// CreatePayoutParams describes one store payout.
type CreatePayoutParams struct {
	// WithdrawalID is our correlation id, stored in the payout's metadata
	// so the payout can be found again after an ambiguous failure.
	WithdrawalID string
	// Destination is an address, or a BOLT11 invoice for BTC-LN.
	Destination string
	// Amount in BTC; nil lets a BOLT11 with an amount decide.
	Amount *Amount
	// PayoutMethodID is "BTC-CHAIN" or "BTC-LN".
	PayoutMethodID string
	// Approved pre-approves the payout (needs the cancreatepullpayments
	// permission); otherwise it waits for approval in BTCPay.
	Approved bool
	// Metadata is extra metadata; WithdrawalID wins over a key of the same
	// name.
	Metadata map[string]any
}

type createPayoutRequest struct {
	Destination    string         `json:"destination"`
	Amount         *Amount        `json:"amount,omitempty"`
	PayoutMethodID string         `json:"payoutMethodId"`
	Approved       bool           `json:"approved"`
	Metadata       map[string]any `json:"metadata"`
}

// Payout is BTCPay's PayoutData (2.x).
type Payout struct {
	ID               string        `json:"id"`
	Revision         int           `json:"revision"`
	PullPaymentID    *string       `json:"pullPaymentId"`
	Date             UnixTime      `json:"date"`
	Destination      string        `json:"destination"`
	OriginalCurrency string        `json:"originalCurrency"`
	OriginalAmount   Amount        `json:"originalAmount"`
	PayoutCurrency   string        `json:"payoutCurrency"`
	PayoutAmount     *Amount       `json:"payoutAmount"` // set at approval: what is actually sent
	PayoutMethodID   string        `json:"payoutMethodId"`
	State            PayoutState   `json:"state"`
	PaymentProof     *PaymentProof `json:"paymentProof"`
	Metadata         Metadata      `json:"metadata"`
}

// WithdrawalID returns the withdrawal id from the payout's metadata.
func (p Payout) WithdrawalID() string { return p.Metadata.String(MetadataWithdrawalID) }

// PaymentProof is a payout's proof of payment. BTCPay writes its keys in
// PascalCase for on-chain and Lightning proofs and in camelCase in manual
// proofs, so they are read case-insensitively.
type PaymentProof struct {
	ProofType     string   // PayoutTransactionOnChainBlob, PayoutLightningBlob, or a manual type
	TransactionID string   // on chain: the txid
	Candidates    []string // on chain: txids seen for the payout (nulled once Completed)
	Accounted     *bool
	PaymentHash   string // Lightning
	Preimage      string // Lightning
	ID            string // manual proofs; Lightning repeats the payment hash
	Link          string
	Raw           json.RawMessage // the proof as sent
}

// UnmarshalJSON reads a proof with keys in any case.
func (p *PaymentProof) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	low := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		low[strings.ToLower(k)] = v
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(low[k], &s) // absent, null or not a string: ""
		return s
	}
	*p = PaymentProof{
		ProofType: str("prooftype"), TransactionID: str("transactionid"), PaymentHash: str("paymenthash"),
		Preimage: str("preimage"), ID: str("id"), Link: str("link"), Raw: append(json.RawMessage(nil), b...),
	}
	if raw, ok := low["candidates"]; ok {
		_ = json.Unmarshal(raw, &p.Candidates)
	}
	if raw, ok := low["accounted"]; ok {
		var v bool
		if json.Unmarshal(raw, &v) == nil {
			p.Accounted = &v
		}
	}
	return nil
}

// MarshalJSON writes the proof as it was received.
func (p PaymentProof) MarshalJSON() ([]byte, error) {
	if len(p.Raw) > 0 {
		return p.Raw, nil
	}
	return json.Marshal(map[string]any{"proofType": p.ProofType, "id": p.ID, "link": p.Link})
}

// TxID is the transaction id the proof names: the on-chain txid, or the
// id of a manual proof.
func (p *PaymentProof) TxID() string {
	if p == nil {
		return ""
	}
	if p.TransactionID != "" {
		return p.TransactionID
	}
	if p.PaymentHash == "" {
		return p.ID
	}
	return ""
}

// CreatePayout creates a store payout (no pull payment). Re-read the payout
// after creating it: BTCPay may cancel an auto-approval that fails and still
// answer 200. On ErrUnreachable the payout may exist: look for it with
// PayoutByWithdrawalID before creating another.
func (c *Client) CreatePayout(ctx context.Context, p CreatePayoutParams) (Payout, error) {
	if p.WithdrawalID == "" {
		return Payout{}, errors.New("btcpay create payout: withdrawal id is required")
	}
	meta := metadataWith(p.Metadata, MetadataWithdrawalID, p.WithdrawalID)
	req := createPayoutRequest{Destination: p.Destination, Amount: p.Amount, PayoutMethodID: p.PayoutMethodID,
		Approved: p.Approved, Metadata: meta}
	return callFor[Payout](ctx, c, "create payout", "POST", c.storePath("payouts"), nil, req)
}

// GetPayout returns one payout; errors.Is(err, ErrNotFound) when it does not
// exist.
func (c *Client) GetPayout(ctx context.Context, id string) (Payout, error) {
	return callFor[Payout](ctx, c, "get payout", "GET", c.storePath("payouts", id), nil, nil)
}

// ListPayouts lists the store's payouts, cancelled ones too when asked.
func (c *Client) ListPayouts(ctx context.Context, includeCancelled bool) ([]Payout, error) {
	var out []Payout
	err := c.eachPayout(ctx, includeCancelled, func(p Payout) bool { out = append(out, p); return true })
	return out, err
}

// eachPayout reads the store's payouts one at a time. BTCPay neither pages
// nor filters the list, so it is read as a stream: any number of payouts
// in constant memory, with no cap on the answer's size.
func (c *Client) eachPayout(ctx context.Context, includeCancelled bool, fn func(Payout) bool) error {
	return each(ctx, c, "list payouts", c.storePath("payouts"), payoutsQuery(includeCancelled), fn)
}

// eachPayoutContaining is eachPayout for the payouts whose JSON contains
// needle (eachContaining): the rest are skipped without being decoded.
func (c *Client) eachPayoutContaining(ctx context.Context, includeCancelled bool, needle string, fn func(Payout) bool) error {
	return eachContaining(ctx, c, "list payouts", c.storePath("payouts"), payoutsQuery(includeCancelled), needle, fn)
}

func payoutsQuery(includeCancelled bool) url.Values {
	return url.Values{"includeCancelled": {strconv.FormatBool(includeCancelled)}}
}

// PayoutsByWithdrawalID returns the store's payouts (cancelled ones
// included) whose metadata names withdrawalID. BTCPay has no filter for
// payout metadata and does not page the list, so this reads the list as a
// stream, newest first, and keeps those; with a non-zero since (the
// earliest time a payout of the withdrawal can carry) it stops at the
// first payout dated before since, so that a lookup costs the payouts made
// since then, not every payout the store ever made. It stops early only
// while the list reads newest first (dates never rising, and falling at
// least once before the stop): a server that sends it in another order is
// read to the end.
func (c *Client) PayoutsByWithdrawalID(ctx context.Context, withdrawalID string, since time.Time) ([]Payout, error) {
	var out []Payout
	n := []byte(withdrawalID)
	stop := newestFirst{ordered: !since.IsZero(), since: since.Unix()}
	var bad error
	err := each(ctx, c, "list payouts", c.storePath("payouts"), payoutsQuery(true), func(raw json.RawMessage) bool {
		if stop.past(raw) {
			return false
		}
		if !bytes.Contains(raw, n) {
			return true // not decoded: it does not name the withdrawal
		}
		var p Payout
		if err := json.Unmarshal(raw, &p); err != nil {
			bad = &UnreachableError{Op: "list payouts", Status: http.StatusOK, Err: fmt.Errorf("decode response: %w", scrub(err))}
			return false
		}
		if p.WithdrawalID() == withdrawalID {
			out = append(out, p)
		}
		return true
	})
	if err == nil {
		err = bad
	}
	return out, err
}

// newestFirst decides when a payout list read newest first can stop: at
// the first payout dated before since, once the dates read so far never
// rose and fell at least once (so the list is in that order, not merely
// starting with an old payout). Any payout whose date cannot be read, or
// a date higher than the one before it, turns it off for the rest of the
// list.
type newestFirst struct {
	ordered     bool
	since       int64
	first, prev int64
	seen        int
}

func (s *newestFirst) past(raw []byte) bool {
	if !s.ordered {
		return false
	}
	d, ok := payoutDate(raw)
	switch {
	case !ok:
		s.ordered = false
		return false
	case s.seen == 0:
		s.first = d
	case d > s.prev:
		s.ordered = false
		return false
	}
	s.prev = d
	s.seen++
	return d < s.since && d < s.first
}

// payoutDate reads a payout's "date" (unix seconds, a number or a string)
// from its JSON without decoding the rest.
func payoutDate(raw []byte) (int64, bool) {
	i := bytes.Index(raw, []byte(`"date":`))
	if i < 0 {
		return 0, false
	}
	b := bytes.TrimLeft(raw[i+len(`"date":`):], " \t\r\n\"")
	j := 0
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == 0 || j > 18 {
		return 0, false
	}
	d, err := strconv.ParseInt(string(b[:j]), 10, 64)
	return d, err == nil
}

// PayoutsInTransaction returns the store's payouts (not cancelled) whose
// proof names on-chain transaction txid: the payouts one batched
// transaction pays.
func (c *Client) PayoutsInTransaction(ctx context.Context, txid string) ([]Payout, error) {
	var out []Payout
	err := c.eachPayoutContaining(ctx, false, txid, func(p Payout) bool {
		if p.PaymentProof.TxID() == txid {
			out = append(out, p)
		}
		return true
	})
	return out, err
}

// CancelPayout cancels a payout. BTCPay refuses once it is InProgress or
// Completed.
func (c *Client) CancelPayout(ctx context.Context, id string) error {
	return c.call(ctx, "cancel payout", "DELETE", c.storePath("payouts", id), nil, nil, nil)
}
