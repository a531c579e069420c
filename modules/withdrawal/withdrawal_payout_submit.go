package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/platform/btcpay"
	"svc/platform/db"
)

// # Submission (approved -> submitting -> submitted)
//
// The submitter first claims the withdrawal in a transaction of its own:
// submitting, a claim token, the end of the claim (next_attempt_at) and
// one more submit_attempts; a BTC fee and net are fixed here from the
// live fee rate (read before the transaction) and never change again.
// Only after that commit does it call the processor, with the withdrawal
// id in the payout's metadata, and then commits the outcome, guarded on
// its claim token:
//
//   - accepted: submitted, backend_ref = the payout id;
//   - refused (400, 422): failed with the processor's reason, the hold
//     kept;
//   - duplicate-destination (an earlier payout to the same address is
//     still open): back to approved, tried again later, so both get paid
//     in turn;
//   - ambiguous (timeout, 5xx, connection lost): still submitting, the
//     claim given up, tried again after a backoff.
//
// Every attempt after the first asks the processor for payouts carrying
// the withdrawal id before it creates one (PayoutsByWithdrawalID) and
// adopts what it finds: an ambiguous failure, a crash between the call
// and the commit, or a claim taken over after it expired can therefore
// never create a second payout. A claim lasts ClaimTTL, longer than the
// calls it covers (they are cut off before it ends), so a takeover never
// overlaps a live call; two submitters racing for one withdrawal are
// decided by the claim's guarded update.
//
// The fee at submission: BTC pays the live fee rate times the assumed
// size. When that fee would leave a net at or below the dust limit (or
// nothing, under deduct), nothing is sent: the withdrawal fails with a
// reason saying so and keeps its hold for an operator to release. BTC_LN
// keeps the flat fee quoted at creation, which the invoice's amount was
// checked against.
//
// # Refusals that are not about the payout
//
// 401, 403, 404 and 429 on creation say the deployment is wrong (a key
// without the payout permission, another store) or busy, not that this
// payout is: the withdrawal stays submitting and is retried, with the
// withdrawal.submission_stuck alert, raised too after stuckAfter failed
// attempts of any kind.

// backoff is the wait before attempt n+1 after an ambiguous failure:
// 15 s doubling, at most 10 minutes.
func backoff(n int) time.Duration {
	d := 15 * time.Second
	for i := 1; i < n && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}

// submittable reports a withdrawal the submitter may claim now.
func (s *Service) submittable(w Withdrawal) bool {
	if !slices.Contains(processorAssets, w.Asset) {
		return false
	}
	due := w.NextAttemptAt == nil || !w.NextAttemptAt.After(s.now())
	switch w.Status {
	case StatusApproved:
		return due
	case StatusSubmitting:
		return w.NextAttemptAt != nil && due
	}
	return false
}

// Submit hands an approved withdrawal's payout to the processor, or
// resumes a submission whose claim ended (see the file comment). It does
// nothing when the withdrawal is not due.
func (s *Service) Submit(ctx context.Context, id uuid.UUID) error {
	w, err := s.Get(ctx, id)
	if err != nil || !s.submittable(w) {
		return err
	}
	var rate btcpay.Amount
	if w.Asset == asset.BTC && w.Fee == nil {
		if rate, err = s.feeRate(ctx); err != nil {
			return fmt.Errorf("withdrawal %s: fee rate for submission: %w", id, err)
		}
	}
	token := uuid.New()
	claimed, prior := false, 0
	started := time.Now()
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		claimed = false
		cur, err := lockWithdrawal(ctx, tx, id)
		if err != nil || !s.submittable(cur) {
			return err
		}
		a, err := (&asset.Store{DB: tx}).Get(ctx, cur.Asset)
		if err != nil {
			return err
		}
		if a.WithdrawalsHaltedSince != nil && cur.Status == StatusApproved {
			return nil // halted by reconciliation: nothing new is handed over
		}
		set := map[string]any{"claim_token": token, "next_attempt_at": s.now().Add(s.claimTTL()),
			"submit_attempts": cur.SubmitAttempts + 1}
		if cur.Fee == nil {
			fee, net, refusal := s.fixFee(cur, rate)
			if refusal != "" {
				return s.failTx(ctx, tx, &cur, a, refusal, nil)
			}
			set["fee"], set["amount_net"] = fee, net
		}
		prior = cur.SubmitAttempts
		if err := s.transit(ctx, tx, &cur, Claim, set); err != nil {
			return err
		}
		w, claimed = cur, true
		return nil
	})
	if err != nil || !claimed {
		return err
	}
	// The calls end well before the claim does (counted from before the
	// claim was written), so that no other submitter can take over while
	// one of them is still in flight.
	callCtx, cancel := context.WithDeadline(ctx, started.Add(s.claimTTL()*3/4))
	p, err := s.handOver(callCtx, w, prior > 0)
	cancel()
	// An ambiguous failure is retried after a backoff, and never before the
	// claim would have ended: a create the processor is still working on
	// when the client gave up shows in the next attempt's lookup.
	retryAt := s.now().Add(backoff(prior + 1))
	if w.NextAttemptAt != nil && w.NextAttemptAt.After(retryAt) {
		retryAt = *w.NextAttemptAt
	}
	var refused *btcpay.RefusedError
	switch {
	case err == nil:
		cur, err := s.accept(ctx, w, token, p)
		if err != nil {
			return err
		}
		// The processor's answer is the payout as it stands (an instant
		// payout processor may have completed it already): followed at
		// once, without reading the withdrawal and the payout again.
		return s.follow(ctx, cur, p)
	case errors.As(err, &refused) && refused.Code == "duplicate-destination":
		return s.release(ctx, w, token, Requeue, map[string]any{"next_attempt_at": s.now().Add(RequeueWait)}, "", err)
	case errors.As(err, &refused) && !errors.Is(err, errLookup) && definitive(refused):
		reason := "the payment processor refused the payout: " + refused.Reason()
		if refused.Code != "" {
			reason += " (" + refused.Code + ")"
		}
		return s.release(ctx, w, token, Fail, map[string]any{"failure_reason": reason, "next_attempt_at": nil}, reason, err)
	default:
		if prior+1 >= stuckAfter || (refused != nil && !definitive(refused)) {
			s.raise(ctx, s.DB, AlertSubmissionStuck, w, fmt.Sprintf("withdrawal %s could not be handed to the payment processor after %d attempts (last: %v); "+
				"it stays submitting and is retried, and no payout is created twice. Check the processor's URL, API key permissions (btcpay.store.cancreatepullpayments) and store.",
				w.ID, prior+1, err))
		}
		return s.release(ctx, w, token, Retry, map[string]any{"next_attempt_at": retryAt}, "", err)
	}
}

// stuckAfter is the number of attempts after which a submission that
// keeps failing raises an operator alert.
const stuckAfter = 5

// Stuck reports a withdrawal stuck in submission: still submitting after
// stuckAfter attempts, the rule that raises withdrawal.submission_stuck.
// An operator releases it (with an attestation) once no payout exists.
func Stuck(w Withdrawal) bool {
	return w.Status == StatusSubmitting && w.SubmitAttempts >= stuckAfter
}

// definitive reports a refusal about the payout itself (400 and 422: a
// destination, an amount, a payout method), which fails the withdrawal.
// 401, 403 and 404 (an API key without the permission, an unknown store)
// are about the deployment: retried, with an operator alert. (The client
// already reports 408 and 429 as unreachable.)
func definitive(r *btcpay.RefusedError) bool {
	switch r.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return false
	}
	return true
}

// fixFee returns the fee and net fixed at submission, or why nothing can
// be sent.
func (s *Service) fixFee(w Withdrawal, rate btcpay.Amount) (fee, net int64, refusal string) {
	fee = w.FeeEstimate
	if w.Asset == asset.BTC {
		var err error
		if fee, err = rate.MulCeil(s.Config.AssumedTxVBytes); err != nil {
			return 0, 0, fmt.Sprintf("the network fee at submission cannot be computed (%v); nothing was sent", err)
		}
	}
	est, err := netOf(ledger.FeeMode(w.FeeMode), w.AmountGross, fee)
	if err == nil && (w.Asset != asset.BTC || est.Net > DustLimit) {
		return est.Fee, est.Net, ""
	}
	return 0, 0, fmt.Sprintf("the network fee at submission, %d sat (%s sat/vB x %d vB), leaves a net of %d sat, "+
		"at or below the dust limit of %d sat; nothing was sent", fee, rate, s.Config.AssumedTxVBytes, max(w.AmountGross-fee, 0), DustLimit)
}

// errLookup marks a failure to list the processor's payouts: whatever its
// HTTP status, it says nothing about the payout, so it is retried.
var errLookup = errors.New("looking up the withdrawal's payouts")

// handOver returns the processor's payout for w, creating it only when
// this is the first attempt or a lookup found none.
func (s *Service) handOver(ctx context.Context, w Withdrawal, lookFirst bool) (btcpay.Payout, error) {
	if lookFirst {
		if p, ok, err := s.findPayout(ctx, w); err != nil || ok {
			return p, err
		}
	}
	method := btcpay.MethodBTCChain
	if w.Asset == asset.BTCLN {
		method = btcpay.MethodBTCLN
	}
	amount := btcpay.AmountFromUnits(*w.AmountNet, 8)
	p, err := s.Processor.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: w.ID.String(), Destination: w.Destination,
		Amount: &amount, PayoutMethodID: method, Approved: true})
	if err != nil {
		return btcpay.Payout{}, err
	}
	if p.ID == "" {
		// BTCPay answers 200 without a payout when its approval failed: the
		// payout exists (cancelled); find it.
		p, ok, err := s.findPayout(ctx, w)
		if err == nil && !ok {
			err = &btcpay.UnreachableError{Op: "create payout", Message: "the answer named no payout and none carries the withdrawal id yet"}
		}
		return p, err
	}
	return p, nil
}

// findPayout asks the processor for w's payouts: the live one (the oldest
// when, against every rule, there are several: an alert says so), else
// the newest cancelled one; false when there is none.
func (s *Service) findPayout(ctx context.Context, w Withdrawal) (btcpay.Payout, bool, error) {
	ps, err := s.Processor.PayoutsByWithdrawalID(ctx, w.ID.String(), payoutsSince(w))
	if err != nil {
		return btcpay.Payout{}, false, fmt.Errorf("%w: %w", errLookup, err)
	}
	var live, cancelled []btcpay.Payout
	for _, p := range ps {
		if p.State == btcpay.PayoutCancelled {
			cancelled = append(cancelled, p)
		} else {
			live = append(live, p)
		}
	}
	byDate := func(a, b btcpay.Payout) int { return a.Date.Time.Compare(b.Date.Time) }
	slices.SortStableFunc(live, byDate)
	slices.SortStableFunc(cancelled, byDate)
	switch {
	case len(live) > 1:
		s.raise(ctx, s.DB, AlertDuplicatePayout, w, fmt.Sprintf("withdrawal %s has %d payouts at the processor that are not cancelled; the service follows %s only: cancel the others",
			w.ID, len(live), live[0].ID))
		return live[0], true, nil
	case len(live) == 1:
		return live[0], true, nil
	case len(cancelled) > 0:
		return cancelled[len(cancelled)-1], true, nil
	}
	return btcpay.Payout{}, false, nil
}

// accept records that the processor has the payout: submitted, with its
// id. It returns the withdrawal as committed. One guarded statement, no
// transaction around it: it applies only while w (as claimed) is still
// submitting under this submitter's claim (holdsClaim).
func (s *Service) accept(ctx context.Context, w Withdrawal, token uuid.UUID, p btcpay.Payout) (Withdrawal, error) {
	// An adopted payout's deadline counts from its creation.
	at := s.now()
	if !p.Date.IsZero() && p.Date.Before(at) {
		at = p.Date.UTC()
	}
	cur := w
	err := s.transitIf(ctx, s.DB, &cur, Accept, map[string]any{"backend_ref": p.ID, "submitted_at": at,
		"claim_token": nil, "next_attempt_at": nil}, "claim_token", token)
	if errors.Is(err, ErrIllegalTransition) {
		return Withdrawal{}, fmt.Errorf("withdrawal %s: the claim was lost before payout %s was recorded; the next attempt finds it", w.ID, p.ID)
	}
	if err != nil {
		return Withdrawal{}, fmt.Errorf("withdrawal %s: record payout %s: %w", w.ID, p.ID, err)
	}
	return cur, nil
}

func holdsClaim(w Withdrawal, token uuid.UUID) bool {
	return w.Status == StatusSubmitting && w.ClaimToken != nil && *w.ClaimToken == token
}

// release gives up the claim after an unsuccessful call, by trigger t
// (retry: still submitting until set's next_attempt_at; requeue; fail)
// with the columns of set. A failure emits withdrawal.failed with reason.
// cause is logged.
func (s *Service) release(ctx context.Context, w Withdrawal, token uuid.UUID, t Trigger, set map[string]any, reason string, cause error) error {
	s.log().WarnContext(ctx, "withdrawal: payout not handed over", "withdrawal_id", w.ID, "outcome", string(t), "error", cause)
	set["claim_token"] = nil
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		cur, err := lockWithdrawal(ctx, tx, w.ID)
		if err != nil {
			return err
		}
		if !holdsClaim(cur, token) {
			return nil // taken over: the new claimant decides
		}
		if t == Fail {
			a, err := (&asset.Store{DB: tx}).Get(ctx, cur.Asset)
			if err != nil {
				return err
			}
			return s.failTx(ctx, tx, &cur, a, reason, set)
		}
		return s.transit(ctx, tx, &cur, t, set)
	})
}
