package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/btcpay"
	"svc/platform/fault"
)

// # After a release
//
// A withdrawal whose hold was returned while its payout or transaction
// was known stays watched for RefundWatch (refund_watch_until, so a
// restart keeps it): each pass reads a page of them in turn, the payout
// and, for BTC, the wallet's view of the transaction; a completion or a
// confirmation raises withdrawal.paid_after_refund once and ends the
// watch. (USDT_TRC20 releases are watched by ConfirmUSDT.) A release of
// a BTC withdrawal with a transaction is refused while the wallet shows
// it pending or confirmed (transactionGone), and a release of one still
// submitting only once its claim has lapsed (claimLapsed).
//
// A withdrawal released after any submission attempt is watched too, even
// with no payout recorded: a create call that was still on its way to the
// processor when the release read the processor's list (a stalled
// submitter, a slow processor) can make a payout afterwards, which the
// processor would pay. Each pass lists the payouts carrying the
// withdrawal id (latePayout) and raises withdrawal.paid_after_refund for
// any but the recorded one that is not cancelled, naming its state: an
// operator cancels it while it has not paid, or corrects the books.

// watchedReleases returns the next page of refunded withdrawals of the
// assets whose payout or transaction is still watched, walking them by id
// from *after (which it moves on) so that each is read in turn; it first
// ends the watches that ran out.
func (s *Service) watchedReleases(ctx context.Context, assets []string, after *uuid.UUID) ([]Withdrawal, error) {
	if _, err := s.DB.NewUpdate().Model((*Withdrawal)(nil)).Set("refund_watch_until = NULL").
		Where("refund_watch_until IS NOT NULL AND asset IN (?) AND refund_watch_until <= ?", bun.List(assets), s.now()).Exec(ctx); err != nil {
		return nil, fmt.Errorf("end the watches of released withdrawals: %w", err)
	}
	s.failedMu.Lock()
	from := *after
	s.failedMu.Unlock()
	var page []Withdrawal
	if err := s.DB.NewSelect().Model(&page).
		Where("refund_watch_until IS NOT NULL AND asset IN (?) AND status = ?", bun.List(assets), StatusRefunded).
		Where("id > ?", from).OrderExpr("id").Limit(int64(s.payoutBatch())).Scan(ctx); err != nil {
		return nil, fmt.Errorf("list watched released withdrawals: %w", err)
	}
	s.failedMu.Lock()
	*after = uuid.Nil
	if len(page) == s.payoutBatch() {
		*after = page[len(page)-1].ID
	}
	s.failedMu.Unlock()
	return page, nil
}

// paidAfterRefund raises withdrawal.paid_after_refund about the refunded
// withdrawal w and ends its watch: the alert says what an operator has to
// do, and nothing the service reads afterwards changes it.
func (s *Service) paidAfterRefund(ctx context.Context, w Withdrawal, detail string) {
	if !s.raise(ctx, s.DB, AlertPaidAfterRefund, w, detail) {
		return // the watch goes on: the next pass raises it again
	}
	if _, err := s.DB.NewUpdate().Model((*Withdrawal)(nil)).Set("refund_watch_until = NULL").
		Where("id = ? AND status = ?", w.ID, StatusRefunded).Exec(ctx); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: end the watch of a released withdrawal", "withdrawal_id", w.ID, "error", err)
	}
}

// latePayout raises withdrawal.paid_after_refund when the processor holds
// a payout of the refunded withdrawal w that is not cancelled and is not
// the one the service recorded: one that an attempt's create call made
// after the release checked the processor (see the file comment). It
// reports whether it raised.
func (s *Service) latePayout(ctx context.Context, w Withdrawal) (bool, error) {
	ps, err := s.Processor.PayoutsByWithdrawalID(ctx, w.ID.String(), payoutsSince(w))
	if err != nil {
		return false, fmt.Errorf("withdrawal %s: list the payouts of a released withdrawal: %w", w.ID, err)
	}
	for _, p := range ps {
		if p.State == btcpay.PayoutCancelled || (w.BackendRef != nil && p.ID == *w.BackendRef) {
			continue
		}
		what := fmt.Sprintf("is %s at the processor, so it may still pay: cancel it in the processor now; if it has paid", p.State)
		if p.State == btcpay.PayoutCompleted {
			what = "completed: the user was paid and refunded;"
		}
		s.paidAfterRefund(ctx, w, fmt.Sprintf("withdrawal %s was released (its hold returned to the user) but payout %s, made for it at the processor after the release was checked, %s "+
			"correct the books (svc admin ledger) and recover the money", w.ID, p.ID, what))
		return true, nil
	}
	return false, nil
}

// payoutLive refuses, with the reason, to release a withdrawal whose
// payout may still pay: any payout of it at the processor that is not
// cancelled.
func (s *Service) payoutLive(ctx context.Context, w Withdrawal) error {
	if w.BackendRef == nil && w.SubmitAttempts == 0 {
		return nil // never handed to the processor
	}
	if s.Processor == nil {
		return fault.New(fault.Unavailable, "the payment processor is not configured: whether the payout of withdrawal "+w.ID.String()+" is cancelled cannot be checked")
	}
	var ps []btcpay.Payout
	var err error
	if unrecordedPayoutPossible(w) {
		// An attempt may have created a payout the service never heard
		// of: every payout carrying the withdrawal id, made since it was.
		ps, err = s.Processor.PayoutsByWithdrawalID(ctx, w.ID.String(), payoutsSince(w))
	}
	// With one attempt and its payout recorded, that payout is the only
	// one (one create call makes at most one): it is read alone.
	if err == nil && w.BackendRef != nil && !slices.ContainsFunc(ps, func(p btcpay.Payout) bool { return p.ID == *w.BackendRef }) {
		var p btcpay.Payout
		if p, err = s.Processor.GetPayout(ctx, *w.BackendRef); err == nil {
			ps = append(ps, p)
		}
	}
	if err != nil {
		return fault.Wrap(fault.Unavailable, "the payment processor could not be asked whether the withdrawal's payout is cancelled; nothing was changed: retry", err)
	}
	for _, p := range ps {
		switch p.State {
		case btcpay.PayoutCancelled:
		case btcpay.PayoutCompleted:
			return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot release withdrawal %s: its payout %s completed at the processor, so the money has left; the service settles it", w.ID, p.ID), ErrIllegalTransition)
		default:
			return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot release withdrawal %s: its payout %s is %s at the processor, not cancelled, so the money may still leave; "+
				"cancel the payout in the processor first (one in progress cannot be cancelled: wait for its outcome)", w.ID, p.ID, p.State), ErrIllegalTransition)
		}
	}
	return nil
}

// claimLapsed refuses, with the reason, to release a withdrawal still
// submitting while a submitter may be calling the processor: its claim
// (or the wait before its next attempt, which never ends before the
// claim would have) has not run out. Once it has, every payout an
// earlier attempt created shows in the processor's list, which
// payoutLive reads.
func (s *Service) claimLapsed(w Withdrawal) error {
	if w.Status != StatusSubmitting {
		return nil
	}
	if w.NextAttemptAt != nil && !w.NextAttemptAt.After(s.now()) {
		return nil
	}
	when := "its claim is live"
	if w.NextAttemptAt != nil {
		when = "a submitter's claim or its retry wait runs until " + w.NextAttemptAt.UTC().Format(time.RFC3339)
	}
	return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot release withdrawal %s yet: it is being handed to the processor (%s); "+
		"retry after that, when the service can ask the processor whether a payout exists", w.ID, when), ErrIllegalTransition)
}

// transactionGone refuses, with the reason, to release a BTC withdrawal
// whose recorded transaction the processor's wallet still shows pending
// or confirmed: only a transaction the wallet shows replaced (a
// conflicting one was mined) or does not know can no longer pay.
func (s *Service) transactionGone(ctx context.Context, w Withdrawal) error {
	if w.Asset != asset.BTC || w.Txid == nil {
		return nil
	}
	if s.Processor == nil {
		return fault.New(fault.Unavailable, "the payment processor is not configured: whether transaction "+*w.Txid+" of withdrawal "+w.ID.String()+" can still confirm cannot be checked")
	}
	wtx, err := s.Processor.WalletTransaction(ctx, *w.Txid)
	switch {
	case errors.Is(err, btcpay.ErrNotFound):
		return nil
	case err != nil:
		return fault.Wrap(fault.Unavailable, "the payment processor's wallet could not be asked about transaction "+*w.Txid+"; nothing was changed: retry", err)
	case wtx.Status == btcpay.TxReplaced && wtx.Confirmations.V <= 0:
		return nil
	case wtx.Status == btcpay.TxConfirmed || wtx.Confirmations.V > 0:
		return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot release withdrawal %s: its transaction %s is confirmed in the wallet (%d confirmations), so the money has left",
			w.ID, *w.Txid, wtx.Confirmations.V), ErrIllegalTransition)
	}
	return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot release withdrawal %s: its transaction %s is %s in the wallet, not replaced, so it may still confirm; "+
		"release it once the wallet shows it replaced (a conflicting transaction confirmed) or no longer knows it", w.ID, *w.Txid, wtx.Status), ErrIllegalTransition)
}
