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
// The submitter first claims the withdrawal in a statement of its own,
// guarded on the row as it read it (claim): submitting, a claim token,
// the end of the claim (next_attempt_at) and one more submit_attempts; a
// BTC fee and net are fixed here from the live fee rate (read before)
// and never change again.
// Only after that commit does it call the processor, with the withdrawal
// id in the payout's metadata, and then commits the outcome, guarded on
// its claim token:
//
//   - accepted: submitted, backend_ref = the payout id; a payout answered
//     as completed already is recorded confirmed, with its broadcast and
//     settlement, in one transaction (acceptCompleted);
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
	if err != nil {
		return err
	}
	return s.submitRow(ctx, w)
}

// submitRow is Submit of withdrawal w as read (by the pass's list, or by
// Submit): the claim applies only while the row is still as read.
func (s *Service) submitRow(ctx context.Context, w Withdrawal) error {
	if !s.submittable(w) {
		return nil
	}
	id := w.ID
	var (
		rate btcpay.Amount
		err  error
	)
	if w.Asset == asset.BTC && w.Fee == nil {
		if rate, err = s.feeRate(ctx); err != nil {
			return fmt.Errorf("withdrawal %s: fee rate for submission: %w", id, err)
		}
	}
	token := uuid.New()
	prior := w.SubmitAttempts
	started := time.Now()
	if claimed, err := s.claim(ctx, &w, token, rate); err != nil || !claimed {
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
		if done, err := s.acceptCompleted(ctx, w, token, p, started.Add(s.claimTTL()*3/4)); done || err != nil {
			return err
		}
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

// claim takes w (as read, and submittable) for this submitter:
// submitting, a claim token, the end of the claim (next_attempt_at) and
// one more submit_attempts, and a BTC fee and net fixed from rate when
// none is. One guarded statement, no transaction and no lock: it applies
// only while the row still holds what w read of the columns a claim or
// any other step changes (status, submit_attempts, next_attempt_at,
// claim_token, fee), so of two submitters that read the same row one
// claims it and the other finds it moved on (TestOneClaimOfARowAsRead);
// nothing new is handed over for an asset that reconciliation halted (a
// claimed one already in the processor's hands is resumed). The
// statement took the place of a transaction of five (the lock, the
// asset, the update and their BEGIN and COMMIT). false: not claimed, and
// nothing to do now. A fee that leaves nothing to send fails the
// withdrawal instead, in a transaction that locks it.
func (s *Service) claim(ctx context.Context, w *Withdrawal, token uuid.UUID, rate btcpay.Amount) (bool, error) {
	set := map[string]any{"claim_token": token, "next_attempt_at": s.now().Add(s.claimTTL()),
		"submit_attempts": w.SubmitAttempts + 1}
	unchanged := map[string]any{"submit_attempts": w.SubmitAttempts, "next_attempt_at": w.NextAttemptAt,
		"claim_token": w.ClaimToken, "fee": w.Fee}
	if w.Fee == nil {
		fee, net, refusal := s.fixFee(*w, rate)
		if refusal != "" {
			return false, s.refuseAtSubmission(ctx, *w, refusal)
		}
		set["fee"], set["amount_net"] = fee, net
	}
	var conds []string
	if w.Status == StatusApproved {
		conds = append(conds, notHalted)
	}
	err := s.transitAsRead(ctx, s.DB, w, Claim, set, unchanged, conds...)
	if errors.Is(err, ErrIllegalTransition) {
		return false, nil // moved on, or halted: the next pass sees it as it is
	}
	return err == nil, err
}

// notHalted is the condition, on a withdrawals row, that its asset's
// withdrawals are not halted by reconciliation.
const notHalted = "NOT EXISTS (SELECT 1 FROM assets a WHERE a.asset = withdrawals.asset AND a.withdrawals_halted_since IS NOT NULL)"

// refuseAtSubmission fails withdrawal w (as read) with refusal, the
// reason a fee fixed at submission leaves nothing to send, if it is still
// due and unclaimed as read; the hold stays.
func (s *Service) refuseAtSubmission(ctx context.Context, w Withdrawal, refusal string) error {
	return s.payoutTx(ctx, w.ID, func(ctx context.Context, tx bun.Tx, cur *Withdrawal, a asset.Asset) error {
		if !s.submittable(*cur) || cur.Fee != nil || cur.SubmitAttempts != w.SubmitAttempts ||
			(a.WithdrawalsHaltedSince != nil && cur.Status == StatusApproved) {
			return nil
		}
		return s.failTx(ctx, tx, cur, a, refusal, nil)
	})
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
	cur := w
	err := s.transitIf(ctx, s.DB, &cur, Accept, map[string]any{"backend_ref": p.ID, "submitted_at": submittedAt(s.now(), p),
		"claim_token": nil, "next_attempt_at": nil}, "claim_token", token)
	if errors.Is(err, ErrIllegalTransition) {
		return Withdrawal{}, fmt.Errorf("withdrawal %s: the claim was lost before payout %s was recorded; the next attempt finds it", w.ID, p.ID)
	}
	if err != nil {
		return Withdrawal{}, fmt.Errorf("withdrawal %s: record payout %s: %w", w.ID, p.ID, err)
	}
	return cur, nil
}

// acceptCompleted records a payout the processor answered as completed
// already (an instant payout processor) in one transaction: the
// withdrawal from submitting to confirmed in one guarded statement (the
// payout id, its transaction and network fee), the broadcast's and the
// settlement's postings, and both events. That took the place of the
// accepted payout's own statement and commit, then a transaction that
// locked the row, read its asset, and wrote the row twice. It applies
// only while w (as claimed) is still submitting under this submitter's
// claim, as accept does. done is false, with nothing written, when the
// answer is not such a payout, or its network fee cannot be read now, or
// the transaction fails for any reason but a lost claim: the ordinary
// way (accept, then follow) records the payout and says why. The reads of
// the network fee end by callsEnd, as the submission's calls do, so that
// they never outlast the claim.
func (s *Service) acceptCompleted(ctx context.Context, w Withdrawal, token uuid.UUID, p btcpay.Payout, callsEnd time.Time) (done bool, err error) {
	if p.State != btcpay.PayoutCompleted || w.Asset != asset.BTC || w.AmountNet == nil || w.Fee == nil {
		return false, nil
	}
	txid := p.PaymentProof.TxID()
	if units, err := payoutUnits(p); err != nil || units != *w.AmountNet || txid == "" {
		return false, nil // the ordinary way raises the alert that says why
	}
	feeCtx, cancel := context.WithDeadline(ctx, callsEnd)
	nf, err := s.networkFee(feeCtx, p, txid)
	cancel()
	if err != nil {
		return false, nil
	}
	// The processor's assets count in satoshis (payoutUnits, handOver).
	a := asset.Asset{Code: w.Asset, Decimals: 8}
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		cur := w
		if err := s.transitThrough(ctx, tx, &cur, map[string]any{"backend_ref": p.ID, "submitted_at": submittedAt(s.now(), p),
			"claim_token": nil, "next_attempt_at": nil, "txid": txid, "network_fee": nf}, "claim_token", token,
			Accept, Broadcast, Confirm); err != nil {
			return err
		}
		return s.broadcastSettledTx(ctx, tx, cur, a, p.ID, txid, nf)
	})
	switch {
	case errors.Is(err, ErrIllegalTransition):
		return true, fmt.Errorf("withdrawal %s: the claim was lost before payout %s was recorded; the next attempt finds it", w.ID, p.ID)
	case err != nil:
		s.log().WarnContext(ctx, "withdrawal: completed payout not recorded at once; recorded as accepted", "withdrawal_id", w.ID, "payout_id", p.ID, "error", err)
		return false, nil
	}
	return true, nil
}

// submittedAt is when the payout p counts as submitted: its creation at
// the processor, or now if that is later (an adopted payout's deadline
// counts from its creation).
func submittedAt(now time.Time, p btcpay.Payout) time.Time {
	if !p.Date.IsZero() && p.Date.Before(now) {
		return p.Date.UTC()
	}
	return now
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
