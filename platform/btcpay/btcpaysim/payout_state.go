package btcpaysim

import (
	"encoding/json"
	"fmt"

	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

func (s *Sim) payoutLocked(id string) (*payout, error) {
	po := s.payouts[id]
	if po == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownPayout, id)
	}
	return po, nil
}

// onPayout runs fn on payout id with s.mu held.
func (s *Sim) onPayout(id string, fn func(po *payout) error) error {
	return locked(s, id, s.payoutLocked, fn)
}

func onChainProof(txid string, completed bool) json.RawMessage {
	// PascalCase, as BTCPay serializes PayoutTransactionOnChainBlob.
	candidates := any([]string{txid})
	if completed {
		candidates = nil
	}
	b, _ := json.Marshal(struct {
		TransactionID string `json:"TransactionId"`
		Candidates    any    `json:"Candidates"`
		ProofType     string `json:"ProofType"`
		Accounted     bool   `json:"Accounted"`
	}{txid, candidates, "PayoutTransactionOnChainBlob", true})
	return b
}

func lightningProof(hash, preimage string) json.RawMessage {
	b, _ := json.Marshal(struct {
		PaymentHash string  `json:"PaymentHash"`
		ProofType   string  `json:"ProofType"`
		Link        *string `json:"Link"`
		ID          string  `json:"Id"`
		Preimage    string  `json:"Preimage"`
	}{hash, "PayoutLightningBlob", nil, hash, preimage})
	return b
}

// ApprovePayout approves a payout created without approval.
func (s *Sim) ApprovePayout(id string) error {
	return s.onPayout(id, func(po *payout) error {
		if po.state != poAwaitingApproval {
			return fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
		}
		s.approveLocked(po)
		return nil
	})
}

// BroadcastPayout puts an approved on-chain payout's transaction on the
// network (InProgress with its txid as proof); txid "" makes one up.
func (s *Sim) BroadcastPayout(id, txid string) (sent string, err error) {
	err = s.onPayout(id, func(po *payout) error {
		if po.method != btcpay.MethodBTCChain || po.state != poAwaitingPayment {
			return fmt.Errorf("%w: payout is %s %s", ErrInvalidState, po.method, po.state)
		}
		s.broadcastLocked(po, txid)
		s.emitPayout(po, btcpay.EventPayoutUpdated)
		sent = po.txid
		return nil
	})
	return sent, err
}

func (s *Sim) broadcastLocked(po *payout, txid string) {
	if txid == "" {
		txid = randHex(32)
	}
	po.txid, po.state = txid, poInProgress
	po.proof = onChainProof(txid, false)
	if t := s.wallet.find(txid); t != nil && len(t.payouts) > 0 {
		// A batch: the payout's output joins a transaction already sent
		// for another payout, whose miner fee is paid once.
		t.amount, _ = t.amount.Sub(po.amount)
		t.payouts = append(t.payouts, po.id)
		return
	}
	// The wallet pays the amount and a miner fee on top.
	fee, _ := s.feeRate.Mul(decimal.MustNew(141, 8))
	sent, _ := po.amount.Add(fee.Ceil(8))
	s.wallet.add(&walletTx{hash: txid, amount: sent.Neg(), ts: s.now(), payouts: []string{po.id}})
}

// CompletePayout completes an approved or in-progress payout: on chain its
// transaction (txid, or a made-up one) confirms; on Lightning it is paid.
// It returns the txid or payment hash.
func (s *Sim) CompletePayout(id, txid string) (done string, err error) {
	err = s.onPayout(id, func(po *payout) error {
		done, err = s.completeLocked(po, txid)
		return err
	})
	return done, err
}

func (s *Sim) completeLocked(po *payout, txid string) (string, error) {
	if po.state != poAwaitingPayment && po.state != poInProgress {
		return "", fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
	}
	switch po.method {
	case btcpay.MethodBTCChain:
		if po.state == poAwaitingPayment { // seen on the network first, then confirmed
			s.broadcastLocked(po, txid)
			s.emitPayout(po, btcpay.EventPayoutUpdated)
		}
		s.wallet.confirm(po.txid, 1)
		po.proof = onChainProof(po.txid, true)
	case btcpay.MethodBTCLN:
		po.txid = po.dedup
		po.proof = lightningProof(po.dedup, randHex(32))
		msat, _ := units(po.amount, 11)
		s.wallet.lnLocalMsat -= msat + s.wallet.lnRoutingFeeMsat
	}
	po.state, po.stalled = poCompleted, false
	s.emitPayout(po, btcpay.EventPayoutUpdated)
	return po.txid, nil
}

// FailPayout ends a payout as failed: BTCPay cancels it (a Lightning
// payment that cannot be routed after its retries, an expired BOLT11).
func (s *Sim) FailPayout(id string) error {
	return s.onPayout(id, func(po *payout) error {
		if po.state == poCompleted || po.state == poCancelled {
			return fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
		}
		if po.txid != "" && po.method == btcpay.MethodBTCChain {
			s.wallet.unpay(po)
		}
		po.state, po.proof, po.stalled = poCancelled, nil, false
		s.emitPayout(po, btcpay.EventPayoutUpdated)
		return nil
	})
}

// ConfirmCancelledPayout completes a payout BTCPay had cancelled: the
// transaction it had sent confirms after all (or, on Lightning, the payment
// it gave up on succeeds). The processor's "failed" was not final.
func (s *Sim) ConfirmCancelledPayout(id, txid string) (done string, err error) {
	err = s.onPayout(id, func(po *payout) error {
		if po.state != poCancelled {
			return fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
		}
		if po.payoutAmount == nil {
			amt := po.amount
			po.payoutAmount = &amt
		}
		po.state = poAwaitingPayment
		done, err = s.completeLocked(po, txid)
		return err
	})
	return done, err
}

// BouncePayout returns an in-progress payout to AwaitingPayment, as after
// a failed Lightning attempt that BTCPay will retry.
func (s *Sim) BouncePayout(id string) error {
	return s.onPayout(id, func(po *payout) error {
		if po.state != poInProgress {
			return fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
		}
		if po.method == btcpay.MethodBTCChain {
			s.wallet.unpay(po)
			po.txid = ""
		}
		po.state, po.proof, po.stalled = poAwaitingPayment, nil, false
		s.emitPayout(po, btcpay.EventPayoutUpdated)
		return nil
	})
}

// UnmarkPayout returns an in-progress on-chain payout to AwaitingPayment
// as BTCPay's mark AwaitingPayment does (by hand, or a processor that
// lost track of it): the proof is cleared, but the transaction stays in
// the wallet and may still confirm. The payout can then be cancelled.
func (s *Sim) UnmarkPayout(id string) error {
	return s.onPayout(id, func(po *payout) error {
		if po.state != poInProgress || po.method != btcpay.MethodBTCChain {
			return fmt.Errorf("%w: payout is %s %s", ErrInvalidState, po.method, po.state)
		}
		po.state, po.proof, po.stalled, po.txid = poAwaitingPayment, nil, false, ""
		s.emitPayout(po, btcpay.EventPayoutUpdated)
		return nil
	})
}

// CancelPayout cancels a payout that is neither in progress nor completed.
func (s *Sim) CancelPayout(id string) error { return s.onPayout(id, s.cancelLocked) }

// StallPayout leaves a payout InProgress with no outcome: a Lightning
// payment whose result is unknown, or an on-chain transaction that never
// confirms. Auto-completion skips it.
func (s *Sim) StallPayout(id string) error {
	return s.onPayout(id, func(po *payout) error {
		if po.state != poAwaitingPayment && po.state != poAwaitingApproval {
			return fmt.Errorf("%w: payout is %s", ErrInvalidState, po.state)
		}
		po.stalled = true
		if po.state == poAwaitingApproval {
			return nil // approval will leave it AwaitingPayment
		}
		if po.method == btcpay.MethodBTCChain {
			s.broadcastLocked(po, "")
		} else {
			po.state = poInProgress
		}
		s.emitPayout(po, btcpay.EventPayoutUpdated)
		return nil
	})
}
