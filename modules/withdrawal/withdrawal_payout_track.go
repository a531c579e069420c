package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ingress"
	"svc/modules/ledger"
	"svc/platform/btcpay"
	"svc/platform/db"
)

// # Tracking (submitted -> broadcast -> confirmed, or failed)
//
// The worker polls every open payout (PAYOUT_POLL_INTERVAL) and the processor's
// payout webhooks trigger the same work at once (PayoutEvent); both
// re-read the payout, since webhooks carry no amounts, and the result
// depends only on the payout's state, so duplicated and reordered
// deliveries do nothing more (a confirmed withdrawal's payout is not read
// at all: nothing moves it). InProgress with an on-chain proof is
// broadcast (the txid; the ledger's payout_broadcast moves the net plus
// the network fee actually paid, read from the wallet's transaction, from
// custody to in flight); Completed is confirmed (ledger.SettlePayout, in
// the same transaction as the broadcast when the payout completed between
// two looks, and then both steps are one update of the row, the two
// postings take one lock of the hold, the two events one statement:
// broadcastSettledTx); Cancelled is failed, hold kept. A payout that completes
// after the withdrawal failed is settled, never refunded: only an
// operator's release returns a failed withdrawal's hold, and a release is
// refused while the processor shows any payout of the withdrawal that is
// not cancelled.

// failTx moves w to failed with reason (and the columns of set) and emits
// withdrawal.failed; the hold stays.
func (s *Service) failTx(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset, reason string, set map[string]any) error {
	if set == nil {
		set = map[string]any{}
	}
	set["failure_reason"] = reason
	if err := s.transit(ctx, tx, w, Fail, set); err != nil {
		return err
	}
	return s.emitPayout(ctx, tx, event.WithdrawalFailed, *w, a)
}

// PayoutEvent acts on a processor payout webhook (ingress.PayoutHandler):
// it tracks the withdrawal whose payout it names, read with the same
// statement that finds it. A payout the service has not recorded yet is
// left to the submitter, which records it. (The ingress stores
// PayoutCreated and PayoutApproved without handing them here: see its
// recordOnly.)
func (s *Service) PayoutEvent(ctx context.Context, e ingress.PayoutEvent) error {
	var w Withdrawal
	err := db.GetModel(ctx, s.DB, &w, "WHERE backend_ref = $1", e.PayoutID)
	if db.IsNoRows(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find the withdrawal of payout %s: %w", e.PayoutID, err)
	}
	return s.trackRow(ctx, w)
}

// Track reads a withdrawal's payout from the processor and moves the
// withdrawal to match it (see the file comment).
func (s *Service) Track(ctx context.Context, id uuid.UUID) error {
	if s.Processor == nil {
		return nil
	}
	w, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return s.trackRow(ctx, w)
}

// trackRow is Track of withdrawal w, as already read.
func (s *Service) trackRow(ctx context.Context, w Withdrawal) error {
	if s.Processor == nil || !slices.Contains(processorAssets, w.Asset) || w.Status == StatusConfirmed {
		// Nothing the processor says moves a confirmed withdrawal: the
		// payout is not read again (each payout's webhooks ask for it
		// after its confirmation too).
		return nil
	}
	if w.Status == StatusRefunded && w.Asset == asset.BTC && w.Txid != nil {
		// The transaction may confirm whatever the payout says (the
		// processor gave up on it, the wallet did not).
		wtx, err := s.Processor.WalletTransaction(ctx, *w.Txid)
		switch {
		case errors.Is(err, btcpay.ErrNotFound):
		case err != nil:
			return fmt.Errorf("withdrawal %s: read wallet transaction %s: %w", w.ID, *w.Txid, err)
		case wtx.Status == btcpay.TxConfirmed || wtx.Confirmations.V > 0:
			s.paidAfterRefund(ctx, w, fmt.Sprintf("BTC withdrawal %s was released (its hold returned to the user) but its transaction %s is now confirmed in the wallet (%d confirmations): "+
				"the user was paid and refunded; correct the books (svc admin ledger) and recover the money", w.ID, *w.Txid, wtx.Confirmations.V))
			return nil
		}
	}
	if w.Status == StatusRefunded && w.RefundWatchUntil != nil && unrecordedPayoutPossible(w) {
		if raised, err := s.latePayout(ctx, w); err != nil || raised {
			return err
		}
	}
	if w.BackendRef == nil {
		// A Lightning withdrawal that failed before any payout existed.
		if w.Asset == asset.BTCLN && w.Status == StatusFailed && s.invoiceExpired(w) {
			return s.expire(ctx, w.ID, "")
		}
		return nil
	}
	p, err := s.Processor.GetPayout(ctx, *w.BackendRef)
	if err != nil {
		return fmt.Errorf("withdrawal %s: read payout %s: %w", w.ID, *w.BackendRef, err)
	}
	return s.follow(ctx, w, p)
}

// follow moves withdrawal w (as read) to match its payout p (as read).
func (s *Service) follow(ctx context.Context, w Withdrawal, p btcpay.Payout) error {
	if units, err := payoutUnits(p); err != nil || w.AmountNet == nil || units != *w.AmountNet {
		s.raise(ctx, s.DB, AlertPayoutMismatch, w, fmt.Sprintf("payout %s of withdrawal %s pays %s BTC, not the net of %d sat (or its amount cannot be read: %v); "+
			"the service does not move the withdrawal: check the payout in the processor", p.ID, w.ID, payoutAmount(p), derefInt(w.AmountNet), err))
		return nil
	}
	over := w.Status == StatusConfirmed || w.Status == StatusRefunded
	switch {
	case p.State == btcpay.PayoutCompleted && w.Status == StatusRefunded:
		s.paidAfterRefund(ctx, w, fmt.Sprintf("payout %s of withdrawal %s completed after its hold was returned: the user was paid and refunded; correct the books (svc admin ledger) and recover the money", p.ID, w.ID))
		return nil
	case over:
		return nil // only a completion concerns a withdrawal that is over
	}
	switch p.State {
	case btcpay.PayoutCompleted:
		return s.complete(ctx, w, p)
	case btcpay.PayoutInProgress:
		if w.Asset == asset.BTC {
			txid := p.PaymentProof.TxID()
			switch {
			case txid == "":
			case w.Status == StatusSubmitted || w.Status == StatusFailed:
				return s.broadcast(ctx, w, p, txid)
			case w.Status == StatusBroadcast && txid != derefStr(w.Txid):
				return s.broadcast(ctx, w, p, txid) // sent again in another transaction
			}
			return nil
		}
	case btcpay.PayoutCancelled:
		if w.Status == StatusSubmitted || w.Status == StatusBroadcast {
			if err := s.fail(ctx, w.ID, fmt.Sprintf("the payment processor cancelled payout %s", p.ID)); err != nil {
				return err
			}
		}
		if w.Asset == asset.BTCLN {
			if s.invoiceExpired(w) {
				return s.expire(ctx, w.ID, p.ID)
			}
			s.raiseHoldNeedsAttestation(ctx, w, p)
		}
		return nil
	}
	if w.Asset == asset.BTCLN {
		return s.lightningDeadline(ctx, w, p)
	}
	return nil
}

// payoutUnits is what the payout sends, in satoshis.
func payoutUnits(p btcpay.Payout) (int64, error) { return payoutAmount(p).Units(8) }

func payoutAmount(p btcpay.Payout) btcpay.Amount {
	if p.PayoutAmount != nil {
		return *p.PayoutAmount
	}
	return p.OriginalAmount
}

// fail moves a withdrawal whose payout will not proceed to failed.
func (s *Service) fail(ctx context.Context, id uuid.UUID, reason string) error {
	return s.payoutTx(ctx, id, func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error {
		if w.Status != StatusSubmitted && w.Status != StatusBroadcast {
			return nil
		}
		return s.failTx(ctx, tx, w, a, reason, nil)
	})
}

// broadcast records an on-chain payout's transaction.
func (s *Service) broadcast(ctx context.Context, w Withdrawal, p btcpay.Payout, txid string) error {
	nf, err := s.networkFee(ctx, p, txid)
	if err != nil {
		return err
	}
	return s.payoutTx(ctx, w.ID, func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error {
		switch {
		case w.Status == StatusSubmitted || w.Status == StatusFailed:
			return s.broadcastTx(ctx, tx, w, a, txid, nf)
		case w.Status == StatusBroadcast && txid != derefStr(w.Txid):
			return s.resentTx(ctx, tx, w, txid, nf)
		}
		return nil
	})
}

// resentTx records that a broadcast payout was sent again in another
// transaction (the first was replaced or dropped): its txid and network
// fee change; the ledger keeps what the first broadcast put in flight, and
// the settlement takes the difference from custody.
func (s *Service) resentTx(ctx context.Context, tx bun.Tx, w *Withdrawal, txid string, nf int64) error {
	s.log().WarnContext(ctx, "withdrawal: payout sent again in another transaction", "withdrawal_id", w.ID, "old_txid", derefStr(w.Txid), "txid", txid)
	return tx.NewUpdate().Model(w).Set("txid = ?, network_fee = ?, updated_at = ?", txid, nf, s.now()).
		Where("id = ? AND status = ?", w.ID, StatusBroadcast).Returning("*").Scan(ctx)
}

// complete confirms a payout the processor completed, broadcasting it
// first in the same transaction when that was not recorded yet.
func (s *Service) complete(ctx context.Context, w Withdrawal, p btcpay.Payout) error {
	var txid string
	var nf int64
	if w.Asset == asset.BTC {
		if txid = p.PaymentProof.TxID(); txid == "" {
			s.raise(ctx, s.DB, AlertPayoutUnverifiable, w, fmt.Sprintf("payout %s of withdrawal %s is completed at the processor without a transaction id (marked paid by hand?); "+
				"the service cannot tell what left the wallet and leaves the withdrawal %s: check the wallet", p.ID, w.ID, w.Status))
			return nil
		}
		if w.Status != StatusBroadcast || txid != derefStr(w.Txid) {
			var err error
			if nf, err = s.networkFee(ctx, p, txid); err != nil {
				return err
			}
		}
	} else {
		if p.PaymentProof != nil {
			txid = p.PaymentProof.PaymentHash
		}
		if txid == "" {
			txid = derefStr(w.PaymentHash)
		}
	}
	return s.payoutTx(ctx, w.ID, func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error {
		switch w.Status {
		case StatusSubmitted, StatusFailed:
			if w.NetworkFee == nil && w.AmountNet != nil && w.Fee != nil {
				// Never broadcast before: both steps in one update of the
				// row, one lock of the hold, one statement of events.
				if err := s.transitThrough(ctx, tx, w, map[string]any{"txid": txid, "network_fee": nf}, "", nil, Broadcast, Confirm); err != nil {
					return err
				}
				return s.broadcastSettledTx(ctx, tx, *w, a, p.ID, txid, nf)
			}
			if err := s.broadcastTx(ctx, tx, w, a, txid, nf); err != nil {
				return err
			}
		case StatusBroadcast:
			if w.Asset == asset.BTC && txid != derefStr(w.Txid) {
				if err := s.resentTx(ctx, tx, w, txid, nf); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		return s.settleTx(ctx, tx, w, a, fmt.Sprintf("payout %s completed", p.ID))
	})
}

// broadcastSettledTx posts and emits, for w (as written: confirmed, with
// txid and its network fee nf, never broadcast before), what its
// broadcast and its settlement post and emit one after the other: the
// two postings under one lock of the hold and one read of it
// (ledger.SettleBroadcastPayout), withdrawal.broadcast and
// withdrawal.completed in one statement.
func (s *Service) broadcastSettledTx(ctx context.Context, tx bun.Tx, w Withdrawal, a asset.Asset, payoutID, txid string, nf int64) error {
	if _, _, err := ledger.SettleBroadcastPayout(ctx, tx, *w.AmountNet+nf, "payout transaction "+txid,
		w.settlement(fmt.Sprintf("payout %s completed", payoutID))); err != nil {
		return err
	}
	sent := w
	sent.Status = StatusBroadcast // as withdrawal.broadcast tells it
	return s.emitPayouts(ctx, tx, a, payoutEvent{event.WithdrawalBroadcast, sent}, payoutEvent{event.WithdrawalCompleted, w})
}

// broadcastTx moves w to broadcast with txid: the net plus the network fee
// nf leave custody for in-flight, and withdrawal.broadcast is emitted.
func (s *Service) broadcastTx(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset, txid string, nf int64) error {
	if w.AmountNet == nil {
		return fmt.Errorf("withdrawal %s is broadcast without a fixed net", w.ID)
	}
	// A payout broadcast before it failed (its transaction dropped) and
	// confirmed later, perhaps in another transaction with another fee,
	// keeps its first payout_broadcast: the settlement clears what that
	// put in flight and takes the rest of what left from custody.
	if w.NetworkFee == nil {
		if _, err := ledger.RecordPayoutBroadcast(ctx, tx, w.Asset, *w.AmountNet+nf, w.ID.String(), "payout transaction "+txid); err != nil {
			return err
		}
	}
	if err := s.transit(ctx, tx, w, Broadcast, map[string]any{"txid": txid, "network_fee": nf}); err != nil {
		return err
	}
	return s.emitPayout(ctx, tx, event.WithdrawalBroadcast, *w, a)
}

// networkFee is what the on-chain transaction txid paid the network for
// payout p: the wallet's spend minus every payout the transaction pays,
// shared equally among them when the processor batched several (the
// remainder to the lowest payout ids), so that the shares add up to the
// fee exactly.
func (s *Service) networkFee(ctx context.Context, p btcpay.Payout, txid string) (int64, error) {
	wtx, err := s.Processor.WalletTransaction(ctx, txid)
	if err != nil {
		return 0, fmt.Errorf("payout %s: read wallet transaction %s: %w", p.ID, txid, err)
	}
	spent, err := wtx.Amount.Units(8)
	if err != nil || spent >= 0 {
		return 0, fmt.Errorf("payout %s: wallet transaction %s does not spend from the wallet (amount %s)", p.ID, txid, wtx.Amount)
	}
	all, err := s.payoutsInTransaction(ctx, p, txid)
	if err != nil {
		return 0, err
	}
	batch := []string{p.ID}
	paid, err := payoutUnits(p)
	if err != nil {
		return 0, err
	}
	for _, o := range all {
		if o.ID == p.ID || o.PaymentProof.TxID() != txid {
			continue
		}
		u, err := payoutUnits(o)
		if err != nil {
			return 0, err
		}
		batch, paid = append(batch, o.ID), paid+u
	}
	fee := -spent - paid
	if fee < 0 {
		return 0, fmt.Errorf("payout %s: transaction %s spent %d sat but its payouts add up to %d sat", p.ID, txid, -spent, paid)
	}
	slices.Sort(batch)
	n := int64(len(batch))
	share := fee / n
	if int64(slices.Index(batch, p.ID)) < fee%n {
		share++
	}
	return share, nil
}

// payoutsInTransaction returns the payouts that transaction txid pays
// besides p, or some of them and others that it does not pay (the caller
// keeps those whose proof names txid). It reads the payouts the processor
// linked to the transaction when it linked p among them: a read per
// payout of the batch. Otherwise (a transaction sent outside the payout
// processor, or a server without wallet objects) it lists every payout of
// the store, which costs in proportion to all the payouts the store ever
// made.
func (s *Service) payoutsInTransaction(ctx context.Context, p btcpay.Payout, txid string) ([]btcpay.Payout, error) {
	ids, err := s.Processor.TransactionPayoutIDs(ctx, txid)
	if err != nil {
		return nil, fmt.Errorf("payout %s: read the payouts linked to transaction %s: %w", p.ID, txid, err)
	}
	if slices.Contains(ids, p.ID) {
		out := make([]btcpay.Payout, 0, len(ids)-1)
		for _, id := range ids {
			if id == p.ID {
				continue
			}
			o, err := s.Processor.GetPayout(ctx, id)
			if errors.Is(err, btcpay.ErrNotFound) {
				continue // not a payout of this store: it pays nothing here
			}
			if err != nil {
				return nil, fmt.Errorf("payout %s: read payout %s of transaction %s: %w", p.ID, id, txid, err)
			}
			out = append(out, o)
		}
		return out, nil
	}
	all, err := s.Processor.PayoutsInTransaction(ctx, txid)
	if err != nil {
		return nil, fmt.Errorf("payout %s: list the payouts of transaction %s: %w", p.ID, txid, err)
	}
	return all, nil
}
