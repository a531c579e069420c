package btcpaysim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

// Payout states as BTCPay writes them.
const (
	poAwaitingApproval = "AwaitingApproval"
	poAwaitingPayment  = "AwaitingPayment"
	poInProgress       = "InProgress"
	poCompleted        = "Completed"
	poCancelled        = "Cancelled"
)

// ErrUnknownPayout is returned for a payout the simulator does not have.
var ErrUnknownPayout = errors.New("btcpaysim: no such payout")

// dustBTC is the smallest on-chain payout (546 sat, the P2PKH dust limit).
var dustBTC = decimal.MustNew(546, 8)

type payout struct {
	id           string
	revision     int
	date         time.Time
	destination  string
	method       string
	amount       decimal.Decimal
	payoutAmount *decimal.Decimal
	state        string
	proof        json.RawMessage
	metadata     json.RawMessage
	dedup        string // the address or the BOLT11's payment hash
	txid         string
	stalled      bool
}

type payoutJSON struct {
	ID               string          `json:"id"`
	Revision         int             `json:"revision"`
	PullPaymentID    *string         `json:"pullPaymentId"`
	Date             int64           `json:"date"` // unix seconds, as the server writes it (the template says string)
	Destination      string          `json:"destination"`
	OriginalCurrency string          `json:"originalCurrency"`
	OriginalAmount   string          `json:"originalAmount"`
	PayoutCurrency   string          `json:"payoutCurrency"`
	PayoutAmount     *string         `json:"payoutAmount"`
	PayoutMethodID   string          `json:"payoutMethodId"`
	State            string          `json:"state"`
	PaymentProof     json.RawMessage `json:"paymentProof"`
	Metadata         json.RawMessage `json:"metadata"`
}

func (po *payout) view() payoutJSON {
	v := payoutJSON{ID: po.id, Revision: po.revision, Date: po.date.Unix(), Destination: po.destination,
		OriginalCurrency: "BTC", OriginalAmount: po.amount.String(), PayoutCurrency: "BTC", PayoutMethodID: po.method,
		State: po.state, PaymentProof: po.proof, Metadata: po.metadata}
	if po.payoutAmount != nil {
		s := po.payoutAmount.String()
		v.PayoutAmount = &s
	}
	return v
}

// PayoutInfo is a snapshot of a payout for tests.
type PayoutInfo struct {
	ID, WithdrawalID, State, Method, Destination, Amount, TxID string
}

func (po *payout) info() PayoutInfo {
	var m map[string]any
	_ = json.Unmarshal(po.metadata, &m)
	wid, _ := m[btcpay.MetadataWithdrawalID].(string)
	return PayoutInfo{ID: po.id, WithdrawalID: wid, State: po.state, Method: po.method, Destination: po.destination,
		Amount: po.amount.String(), TxID: po.txid}
}

type createPayoutBody struct {
	Destination    string          `json:"destination"`
	Amount         json.RawMessage `json:"amount"`
	PayoutMethodID string          `json:"payoutMethodId"`
	PullPaymentID  string          `json:"pullPaymentId"`
	Approved       bool            `json:"approved"`
	Metadata       json.RawMessage `json:"metadata"`
}

func (s *Sim) createPayout(w http.ResponseWriter, r *http.Request) {
	var body createPayoutBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		invalid(w, "", "Invalid JSON: "+err.Error())
		return
	}
	if body.PullPaymentID != "" {
		problem(w, http.StatusNotFound, "pullpayment-not-found", "The pull payment was not found")
		return
	}
	method := btcpay.NormalizeMethodID(body.PayoutMethodID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if (method != btcpay.MethodBTCChain && method != btcpay.MethodBTCLN) || !s.hasMethod(method) {
		invalid(w, "payoutMethodId", "Invalid payoutMethodId")
		return
	}
	var amount *decimal.Decimal
	if raw := bytes.TrimSpace(body.Amount); len(raw) > 0 && string(raw) != "null" {
		d, err := decimal.Parse(strings.Trim(string(raw), `"`))
		maxScale := 8
		if method == btcpay.MethodBTCLN {
			maxScale = 11
		}
		if err != nil || !d.IsPos() || d.Trim(0).Scale() > maxScale {
			invalid(w, "amount", "Invalid amount")
			return
		}
		amount = &d
	}
	dest := strings.TrimSpace(body.Destination)
	var dedup string
	switch method {
	case btcpay.MethodBTCChain:
		addr, query, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(dest, "bitcoin:"), "BITCOIN:"), "?")
		if err := validAddress(addr, s.net); err != nil {
			invalid(w, "destination", "Invalid destination: "+err.Error())
			return
		}
		if amount == nil {
			for _, kv := range strings.Split(query, "&") {
				if v, ok := strings.CutPrefix(kv, "amount="); ok {
					if d, err := decimal.Parse(v); err == nil && d.IsPos() {
						amount = &d
					}
				}
			}
		}
		dest, dedup = addr, addr
	case btcpay.MethodBTCLN:
		bolt := strings.TrimPrefix(strings.TrimPrefix(dest, "lightning:"), "LIGHTNING:")
		inv, err := decodeBolt11(bolt, s.net)
		if err != nil {
			invalid(w, "destination", "Invalid destination: "+err.Error())
			return
		}
		if !s.now().Before(inv.Timestamp.Add(inv.Expiry())) {
			invalid(w, "destination", "The BOLT11 invoice submitted has expired.")
			return
		}
		if inv.MilliSat != nil {
			boltAmt := decimal.MustNew(int64(*inv.MilliSat), 11)
			switch {
			case amount == nil:
				amount = &boltAmt
			case boltAmt.Cmp(*amount) > 0:
				invalid(w, "amount", "The BOLT11 invoice's amount is more than the payout's amount")
				return
			case boltAmt.Cmp(*amount) < 0:
				amount = &boltAmt // the destination's amount wins
			}
		}
		dest, dedup = bolt, fmt.Sprintf("%x", inv.PaymentHash[:])
	}
	if amount == nil {
		invalid(w, "amount", "Amount is not specified in destination or payout request")
		return
	}
	for _, other := range s.byDedup[dedup] {
		if other.state != poCompleted && other.state != poCancelled {
			problem(w, http.StatusBadRequest, "duplicate-destination", "This destination is already in use by another payout")
			return
		}
	}
	meta := json.RawMessage(`{}`)
	if raw := bytes.TrimSpace(body.Metadata); len(raw) > 0 && raw[0] == '{' {
		meta = append(json.RawMessage(nil), raw...)
	}
	po := &payout{id: newID(20), date: s.now(), destination: dest, method: method, amount: *amount,
		state: poAwaitingApproval, metadata: meta, dedup: dedup}
	s.payouts[po.id] = po
	s.byDedup[dedup] = append(s.byDedup[dedup], po)
	s.payOrder = append(s.payOrder, po.id)
	s.emitPayout(po, btcpay.EventPayoutCreated)
	if body.Approved {
		if method == btcpay.MethodBTCChain && amount.Cmp(dustBTC) < 0 {
			// BTCPay cancels a payout whose approval finds it too small.
			po.state = poCancelled
			s.emitPayout(po, btcpay.EventPayoutUpdated)
			problem(w, http.StatusBadRequest, "amount-too-low", "The amount is too low to be paid out")
			return
		}
		s.approveLocked(po)
	}
	writeJSON(w, http.StatusOK, po.view())
}

func (s *Sim) approveLocked(po *payout) {
	po.state, po.revision = poAwaitingPayment, po.revision+1
	amt := po.amount
	po.payoutAmount = &amt
	s.emitPayout(po, btcpay.EventPayoutApproved)
	if s.o.AutoCompletePayouts && !po.stalled {
		_, _ = s.completeLocked(po, "")
	}
}

func (s *Sim) lookupPayout(w http.ResponseWriter, r *http.Request) *payout {
	return lookup(w, r, s.payouts, "payoutId", "payout-not-found", "The payout was not found")
}

func (s *Sim) getPayout(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if po := s.lookupPayout(w, r); po != nil {
		writeJSON(w, http.StatusOK, po.view())
	}
}

// listPayouts answers the store's payout list, newest first, as BTCPay
// does: neither filtered nor paged. It is written as a stream, a chunk of
// payouts at a time (the lock held only while a chunk is read), so that a
// client that stops reading early costs the simulator no more than what
// it read.
func (s *Sim) listPayouts(w http.ResponseWriter, r *http.Request) {
	withCancelled := r.URL.Query().Get("includeCancelled") == "true"
	s.mu.Lock()
	s.listings++
	next := len(s.payOrder) - 1
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	_ = bw.WriteByte('[')
	first := true
	chunk := make([]payoutJSON, 0, listChunk)
	for next >= 0 {
		chunk = chunk[:0]
		s.mu.Lock()
		for ; next >= 0 && len(chunk) < listChunk; next-- {
			po := s.payouts[s.payOrder[next]]
			if po.state == poCancelled && !withCancelled {
				continue
			}
			chunk = append(chunk, po.view())
		}
		s.mu.Unlock()
		for _, v := range chunk {
			if !first {
				_ = bw.WriteByte(',')
			}
			first = false
			if err := enc.Encode(v); err != nil {
				return // the client went away
			}
		}
	}
	_ = bw.WriteByte(']')
	_ = bw.Flush()
}

// listChunk is how many payouts the list reads under the lock at a time.
const listChunk = 256

// AddPastPayouts adds n completed on-chain payouts of other withdrawals,
// dated one second apart up to span before now (oldest first), as a
// store that has paid for a long time holds: the lookups of a
// withdrawal's payouts run against a list that long. They go before every
// payout already there in the list's order (their dates are older).
func (s *Sim) AddPastPayouts(n int, span time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	past := make([]string, 0, n)
	step := span / time.Duration(max(n, 1))
	amt := decimal.MustNew(10_000, 8)
	for i := range n {
		txid := randHex(32)
		meta, _ := json.Marshal(map[string]string{btcpay.MetadataWithdrawalID: uuidLike(i)})
		po := &payout{id: newID(20), revision: 1, date: now.Add(-span + time.Duration(i)*step), destination: "bcrt1qpast" + fmt.Sprint(i),
			method: btcpay.MethodBTCChain, amount: amt, payoutAmount: &amt, state: poCompleted, proof: onChainProof(txid, true),
			metadata: meta, dedup: "past" + fmt.Sprint(i), txid: txid}
		s.payouts[po.id] = po
		past = append(past, po.id)
	}
	s.payOrder = append(past, s.payOrder...)
}

// uuidLike makes a withdrawal id of the uuid's shape from i.
func uuidLike(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

func (s *Sim) cancelPayout(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	po := s.lookupPayout(w, r)
	if po == nil {
		return
	}
	if err := s.cancelLocked(po); err != nil {
		problem(w, http.StatusBadRequest, "invalid-state", "The payout can't be cancelled in its current state")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Sim) cancelLocked(po *payout) error {
	switch po.state {
	case poCancelled:
		return nil
	case poInProgress, poCompleted:
		return fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
	}
	po.state = poCancelled
	s.emitPayout(po, btcpay.EventPayoutUpdated)
	return nil
}

// Payout returns a snapshot of a payout.
func (s *Sim) Payout(id string) (PayoutInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	po := s.payouts[id]
	if po == nil {
		return PayoutInfo{}, false
	}
	return po.info(), true
}

// PayoutListings is how many times the store's payout list was read.
func (s *Sim) PayoutListings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listings
}

// Payouts returns snapshots of every payout, oldest first.
func (s *Sim) Payouts() []PayoutInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]PayoutInfo, 0, len(s.payOrder))
	for _, id := range s.payOrder {
		out = append(out, s.payouts[id].info())
	}
	return out
}
