package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ingress"
	"svc/modules/ledger"
	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/fault"
)

// This file carries an approved BTC or BTC_LN withdrawal to confirmed
// through the processor's payouts, with at most one payout per withdrawal
// whatever crashes, timeouts and duplicate deliveries happen. USDT_TRC20
// is never handed to the processor (its plugin has no payouts): an
// operator sends it (withdrawal_usdt.go).
//
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
// # Passes
//
// A pass (ProcessPayouts, every PAYOUT_POLL_INTERVAL) lists what is due
// in batches, oldest first, and goes on to the next batch for up to
// submitBudget; it works payoutLanes withdrawals at once, a destination's
// withdrawals in one lane and in order. A submission the processor
// accepts is followed at once from the processor's answer, so that a
// processor that pays at once is seen without another read.
//
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
// two looks); Cancelled is failed, hold kept. A payout that completes
// after the withdrawal failed is settled, never refunded: only an
// operator's release returns a failed withdrawal's hold, and a release is
// refused while the processor shows any payout of the withdrawal that is
// not cancelled.
//
// # Lightning
//
// BTC_LN has no on-chain proof: a completed payment is broadcast (the
// payment hash as txid) and confirmed in one transaction, with no network
// fee booked (BTCPay does not report routing fees; they show in
// reconciliation). A payment not completed LNPayoutTimeout after
// submission is ended: the service cancels the payout when the processor
// has not sent it yet, and the withdrawal fails. The hold returns by
// itself (refunded, released by "system" with an attestation naming the
// expiry) once the invoice has expired and the payout is cancelled, since
// an expired invoice can no longer be paid; until then one
// withdrawal.hold_needs_attestation alert says, for the payout's state,
// what the service will do and what an operator can do
// (holdNeedsAttestationDetail). A payment in flight (InProgress, its
// outcome unknown: an HTLC is out, for up to its CLTV expiry, MaxHTLCLife)
// is never refunded by the service and cannot be released (payoutLive):
// the hold stays until the processor settles it (confirmed) or cancels it
// (then refunded once the invoice has expired).
//
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
//
// # Refusals that are not about the payout
//
// 401, 403, 404 and 429 on creation say the deployment is wrong (a key
// without the payout permission, another store) or busy, not that this
// payout is: the withdrawal stays submitting and is retried, with the
// withdrawal.submission_stuck alert, raised too after stuckAfter failed
// attempts of any kind.

// Processor is what payouts need of the payment processor (*btcpay.Client).
type Processor interface {
	CreatePayout(ctx context.Context, p btcpay.CreatePayoutParams) (btcpay.Payout, error)
	GetPayout(ctx context.Context, id string) (btcpay.Payout, error)
	PayoutsInTransaction(ctx context.Context, txid string) ([]btcpay.Payout, error)
	TransactionPayoutIDs(ctx context.Context, txid string) ([]string, error)
	PayoutsByWithdrawalID(ctx context.Context, withdrawalID string, since time.Time) ([]btcpay.Payout, error)
	CancelPayout(ctx context.Context, id string) error
	WalletTransaction(ctx context.Context, txid string) (btcpay.WalletTransaction, error)
}

// Payout timing.
const (
	// DefaultClaimTTL is a submitter's claim when the configuration does
	// not say (the app sets four processor timeouts).
	DefaultClaimTTL = time.Minute
	// DefaultLNPayoutTimeout ends a stuck Lightning payout when the
	// configuration does not say (LN_PAYOUT_TIMEOUT_SECONDS).
	DefaultLNPayoutTimeout = time.Hour
	// RefundWatch is how long the payout and the transaction of a refunded
	// withdrawal are still read, in case they confirm after all: longer
	// than an in-flight Lightning payment can last (its HTLC's CLTV expiry,
	// at most 2016 blocks, about 14 days, on the usual nodes) and than a
	// dropped transaction usually takes to be mined again.
	RefundWatch = 15 * 24 * time.Hour
	// RequeueWait is how long a withdrawal whose destination has another
	// open payout waits before it is tried again.
	RequeueWait = time.Minute
	// payoutBatch bounds the withdrawals one pass lists at a time.
	payoutBatch = 200
	// payoutLanes is how many withdrawals a pass works at once (payout
	// calls and their transactions; each lane holds at most one database
	// connection at a time).
	payoutLanes = 4
	// submitBudget is how long a pass goes on taking batches of due
	// withdrawals: a backlog larger than that is taken up by the next
	// pass, which runs PAYOUT_POLL_INTERVAL later, and the pass's tracking
	// of open payouts is not held back by it. Well under the job's
	// timeout (queue.LongestJobTimeout).
	submitBudget = 30 * time.Second
)

// Alert types raised by the payout work.
const (
	AlertHoldNeedsAttestation = "withdrawal.hold_needs_attestation"
	AlertPayoutMismatch       = "withdrawal.payout_mismatch"
	AlertPaidAfterRefund      = "withdrawal.paid_after_refund"
	AlertDuplicatePayout      = "withdrawal.duplicate_payout"
	AlertSubmissionStuck      = "withdrawal.submission_stuck"
	AlertPayoutUnverifiable   = "withdrawal.payout_unverifiable"
	AlertUSDTTransferMissing  = "withdrawal.usdt_transfer_missing"
)

// processorAssets are the assets paid through the processor's payouts.
var processorAssets = []string{asset.BTC, asset.BTCLN}

func (s *Service) claimTTL() time.Duration {
	if s.Config.ClaimTTL > 0 {
		return s.Config.ClaimTTL
	}
	return DefaultClaimTTL
}

func (s *Service) lnTimeout() time.Duration {
	if s.Config.LNPayoutTimeout > 0 {
		return s.Config.LNPayoutTimeout
	}
	return DefaultLNPayoutTimeout
}

// backoff is the wait before attempt n+1 after an ambiguous failure:
// 15 s doubling, at most 10 minutes.
func backoff(n int) time.Duration {
	d := 15 * time.Second
	for i := 1; i < n && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}

// ProcessPayouts is one pass of the worker: it submits what is due and
// looks at every open payout. A withdrawal that cannot be worked now is
// logged and left for the next pass; only a failure to read the lists is
// returned.
func (s *Service) ProcessPayouts(ctx context.Context) error {
	if s.Processor == nil {
		return nil
	}
	now, started := s.now(), time.Now()
	// What is due, batch after batch in the order of creation (each batch
	// after the last one's end, so that a withdrawal left due by a failed
	// attempt is not taken again in this pass), until the budget is spent.
	var last *dueWithdrawal
	for {
		q := s.DB.NewSelect().Model((*Withdrawal)(nil)).Column("id", "created_at", "destination").
			Where("asset IN (?) AND status IN (?)", bun.List(processorAssets), bun.List([]Status{StatusApproved, StatusSubmitting})).
			Where("next_attempt_at IS NULL OR next_attempt_at <= ?", now).
			// Nothing of an asset reconciliation found insolvent is
			// submitted (a claimed one already in the processor's hands is
			// resumed).
			Where("status = ? OR asset NOT IN (SELECT asset FROM assets WHERE withdrawals_halted_since IS NOT NULL)", StatusSubmitting)
		if last != nil {
			q = q.Where("(created_at, id) > (?, ?)", last.CreatedAt, last.ID)
		}
		var due []dueWithdrawal
		if err := q.OrderExpr("created_at, id").Limit(payoutBatch).Scan(ctx, &due); err != nil {
			return fmt.Errorf("list withdrawals to submit: %w", err)
		}
		// One destination's withdrawals in one lane, in order: the
		// processor refuses a second open payout to an address
		// (duplicate-destination), and the older withdrawal goes first.
		ids := make([]uuid.UUID, len(due))
		for i, d := range due {
			ids[i] = d.ID
		}
		s.inLanes(ctx, "submit payout", ids, func(i int) string { return due[i].Destination }, s.Submit)
		if len(due) < payoutBatch || time.Since(started) > submitBudget {
			break
		}
		last = &due[len(due)-1]
	}
	// Every open payout, page by page.
	var after uuid.UUID
	for {
		var page []uuid.UUID
		if err := s.DB.NewSelect().Model((*Withdrawal)(nil)).Column("id").
			Where("asset IN (?) AND status IN (?)", bun.List(processorAssets), bun.List([]Status{StatusSubmitted, StatusBroadcast})).
			Where("id > ?", after).OrderExpr("id").Limit(payoutBatch).Scan(ctx, &page); err != nil {
			return fmt.Errorf("list open payouts: %w", err)
		}
		s.track(ctx, page)
		if len(page) < payoutBatch {
			break
		}
		after = page[len(page)-1]
	}
	// Failed withdrawals can still complete (and Lightning ones expire):
	// a page of them per pass, in turn, so that many of them waiting for
	// an operator never crowd out the rest.
	s.failedMu.Lock()
	after = s.failedAfter
	s.failedMu.Unlock()
	var page []uuid.UUID
	if err := s.DB.NewSelect().Model((*Withdrawal)(nil)).Column("id").
		Where("asset IN (?)", bun.List(processorAssets)).
		Where("status = ? AND (backend_ref IS NOT NULL OR asset = ?)", StatusFailed, asset.BTCLN).
		Where("id > ?", after).OrderExpr("id").Limit(payoutBatch).Scan(ctx, &page); err != nil {
		return fmt.Errorf("list failed payouts: %w", err)
	}
	s.track(ctx, page)
	s.failedMu.Lock()
	s.failedAfter = uuid.Nil
	if len(page) == payoutBatch {
		s.failedAfter = page[len(page)-1]
	}
	s.failedMu.Unlock()
	// Refunded ones whose payout existed are watched for RefundWatch too:
	// a payout that completes, or a transaction that confirms, after the
	// hold was returned raises withdrawal.paid_after_refund even when no
	// webhook says so.
	watched, err := s.watchedReleases(ctx, processorAssets, &s.refundAfter)
	if err != nil {
		return err
	}
	for _, w := range watched {
		if ctx.Err() != nil {
			break
		}
		if err := s.trackRow(ctx, w); err != nil {
			s.log().WarnContext(ctx, "withdrawal: watch a released payout", "withdrawal_id", w.ID, "error", err)
		}
	}
	return nil
}

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
		Where("id > ?", from).OrderExpr("id").Limit(payoutBatch).Scan(ctx); err != nil {
		return nil, fmt.Errorf("list watched released withdrawals: %w", err)
	}
	s.failedMu.Lock()
	*after = uuid.Nil
	if len(page) == payoutBatch {
		*after = page[len(page)-1].ID
	}
	s.failedMu.Unlock()
	return page, nil
}

// paidAfterRefund raises withdrawal.paid_after_refund about the refunded
// withdrawal w and ends its watch: the alert says what an operator has to
// do, and nothing the service reads afterwards changes it.
func (s *Service) paidAfterRefund(ctx context.Context, w Withdrawal, detail string) {
	if s.Alerts == nil {
		return
	}
	if _, _, err := s.Alerts.Raise(ctx, s.DB, alert.Params{Type: AlertPaidAfterRefund, Subject: w.ID.String(), Detail: detail}); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: raise alert", "withdrawal_id", w.ID, "alert_type", AlertPaidAfterRefund, "error", err)
		return
	}
	if _, err := s.DB.NewUpdate().Model((*Withdrawal)(nil)).Set("refund_watch_until = NULL").
		Where("id = ? AND status = ?", w.ID, StatusRefunded).Exec(ctx); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: end the watch of a released withdrawal", "withdrawal_id", w.ID, "error", err)
	}
}

// dueWithdrawal is what a pass lists of a withdrawal due for submission.
type dueWithdrawal struct {
	ID          uuid.UUID `bun:"id"`
	CreatedAt   time.Time `bun:"created_at"`
	Destination string    `bun:"destination"`
}

func (s *Service) track(ctx context.Context, ids []uuid.UUID) {
	s.inLanes(ctx, "track payout", ids, func(i int) string { return ids[i].String() }, s.Track)
}

// inLanes runs work on each of ids in payoutLanes goroutines: the ids
// whose key(i) is the same one after another, in order. Every step of
// the payout work is guarded by the withdrawal's row lock, its state and
// the submitter's claim, so the lanes need no more than that. A failure
// is logged (what, the withdrawal, the error) and left for the next pass;
// a panic is recovered and logged as well, and its lane goes on.
func (s *Service) inLanes(ctx context.Context, what string, ids []uuid.UUID, key func(i int) string, work func(context.Context, uuid.UUID) error) {
	lanes := make([][]int, payoutLanes)
	for i := range ids {
		h := fnv.New32a()
		_, _ = h.Write([]byte(key(i)))
		l := h.Sum32() % payoutLanes
		lanes[l] = append(lanes[l], i)
	}
	one := func(id uuid.UUID) {
		defer func() {
			if r := recover(); r != nil {
				s.log().ErrorContext(ctx, "withdrawal: "+what+" panicked", "withdrawal_id", id, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			}
		}()
		if err := work(ctx, id); err != nil {
			s.log().WarnContext(ctx, "withdrawal: "+what, "withdrawal_id", id, "error", err)
		}
	}
	var wg sync.WaitGroup
	for _, items := range lanes {
		if len(items) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range items {
				if ctx.Err() != nil {
					return // the pass's time is up: the next pass goes on
				}
				one(ids[i])
			}
		}()
	}
	wg.Wait()
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
	if w.Status == StatusRefunded && w.RefundWatchUntil != nil && (w.BackendRef == nil || w.SubmitAttempts > 1) {
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

func (s *Service) invoiceExpired(w Withdrawal) bool {
	return w.InvoiceExpiresAt != nil && !s.now().Before(*w.InvoiceExpiresAt)
}

// lightningDeadline ends a Lightning payout not completed within
// LNPayoutTimeout of its submission: it cancels the payout when the
// processor still allows it (not yet sent) and fails the withdrawal. The
// hold returns at once when the payout is cancelled and the invoice has
// expired (an expired invoice can no longer be paid); otherwise the
// hold-needs-attestation alert is raised, and the hold returns when both
// are true. A payment in flight (InProgress: its outcome unknown) keeps
// the hold even past the invoice's expiry, until the processor resolves
// it (completed: settled; cancelled: refunded); a release is refused
// meanwhile.
func (s *Service) lightningDeadline(ctx context.Context, w Withdrawal, p btcpay.Payout) error {
	if w.SubmittedAt == nil || s.now().Before(w.SubmittedAt.Add(s.lnTimeout())) {
		return nil
	}
	cancelled := false
	if p.State == btcpay.PayoutAwaitingApproval || p.State == btcpay.PayoutAwaitingPayment {
		if err := s.Processor.CancelPayout(ctx, p.ID); err != nil {
			s.log().WarnContext(ctx, "withdrawal: cancel stuck Lightning payout", "withdrawal_id", w.ID, "payout_id", p.ID, "error", err)
		} else {
			cancelled = true
		}
	}
	if w.Status == StatusSubmitted {
		reason := fmt.Sprintf("the Lightning payout %s did not complete within LN_PAYOUT_TIMEOUT_SECONDS (%d s)", p.ID, int64(s.lnTimeout().Seconds()))
		if err := s.fail(ctx, w.ID, reason); err != nil {
			return err
		}
	}
	if cancelled {
		if s.invoiceExpired(w) {
			return s.expire(ctx, w.ID, p.ID)
		}
		p.State = btcpay.PayoutCancelled
	}
	s.raiseHoldNeedsAttestation(ctx, w, p)
	return nil
}

// MaxHTLCLife is how long a Lightning payment can stay in flight: until
// the CLTV expiry of its HTLC, which the usual nodes (LND, Core
// Lightning) cap at 2016 blocks, about 14 days.
const MaxHTLCLife = 2016 * 10 * time.Minute

// raiseHoldNeedsAttestation raises, once per withdrawal, the alert that a
// failed Lightning withdrawal keeps its hold, saying for the payout's
// state at the processor what the service will do and what the operator
// can do.
func (s *Service) raiseHoldNeedsAttestation(ctx context.Context, w Withdrawal, p btcpay.Payout) {
	s.raise(ctx, s.DB, AlertHoldNeedsAttestation, w, holdNeedsAttestationDetail(w, p, s.lnTimeout()))
}

// holdNeedsAttestationDetail is the alert's text (see
// raiseHoldNeedsAttestation).
func holdNeedsAttestationDetail(w Withdrawal, p btcpay.Payout, timeout time.Duration) string {
	head := fmt.Sprintf("Lightning withdrawal %s (payout %s, %s at the processor) failed or did not complete within LN_PAYOUT_TIMEOUT_SECONDS (%d s); its hold of %d sat stays. ",
		w.ID, p.ID, p.State, int64(timeout.Seconds()), w.AmountGross)
	// What happens to the hold once the payout is cancelled.
	onCancel := "the service does not return it by itself (the invoice's expiry is not known): an operator releases it with an attestation"
	if w.InvoiceExpiresAt != nil {
		onCancel = "the service returns it by itself once the invoice has expired (at " + w.InvoiceExpiresAt.UTC().Format(time.RFC3339) +
			"; an expired invoice cannot be paid), and the withdrawal then reads refunded, released by system"
	}
	release := "Operator: may release it before that (svc admin withdrawals release) with an attestation that the payment did not and cannot succeed."
	switch p.State {
	case btcpay.PayoutCancelled:
		return head + "The payout is cancelled, so it can no longer pay: " + onCancel + ". " + release
	case btcpay.PayoutInProgress:
		return head + fmt.Sprintf("The payment is in flight: an HTLC is out and its outcome is unknown; it can stay so until the HTLC's CLTV expiry, "+
			"at most 2016 blocks (about %d days) on the usual nodes, whatever the invoice's expiry. ", int(MaxHTLCLife/(24*time.Hour))) +
			"Service: keeps the hold until the processor settles the payment (the withdrawal is then confirmed and the hold spent) or cancels it; once cancelled, " +
			onCancel + ". Operator: a release is refused while the processor shows the payout in progress; check the payment on the Lightning node, " +
			"and if the node failed it for good, have the processor cancel the payout, then release it with an attestation."
	default:
		return head + "The payout was not sent yet and the service could not cancel it; it tries again on every payout pass (PAYOUT_POLL_INTERVAL). Once it is cancelled, " +
			onCancel + ". Operator: a release is refused while the payout is not cancelled; cancel it in the processor (or wait for the service to), " +
			"then, to return the hold before that, release it (svc admin withdrawals release) with an attestation that the payment did not and cannot succeed."
	}
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

// expire returns the hold of a Lightning withdrawal whose invoice expired
// unpaid (released by "system", with an attestation saying why); a
// withdrawal still submitted fails first, so the platform hears
// withdrawal.failed.
func (s *Service) expire(ctx context.Context, id uuid.UUID, payoutID string) error {
	return s.payoutTx(ctx, id, func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error {
		if w.Status != StatusSubmitted && w.Status != StatusFailed {
			return nil
		}
		if w.Status == StatusSubmitted {
			if err := s.failTx(ctx, tx, w, a, "the Lightning invoice expired before payout "+payoutID+" completed", nil); err != nil {
				return err
			}
		}
		att := fmt.Sprintf("system: the BOLT11 invoice expired at %s and can no longer be paid", w.InvoiceExpiresAt.UTC().Format(time.RFC3339))
		if payoutID != "" {
			att += "; payout " + payoutID + " did not complete"
		}
		_, err := s.returnHold(ctx, tx, w, Expire, "Lightning invoice expired unpaid: hold returned",
			map[string]any{"released_by": "system", "release_attestation": att})
		return err
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

// payoutTx runs fn on the locked withdrawal and its asset in one
// transaction.
func (s *Service) payoutTx(ctx context.Context, id uuid.UUID, fn func(ctx context.Context, tx bun.Tx, w *Withdrawal, a asset.Asset) error) error {
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		w, err := lockWithdrawal(ctx, tx, id)
		if err != nil {
			return err
		}
		a, err := (&asset.Store{DB: tx}).Get(ctx, w.Asset)
		if err != nil {
			return err
		}
		return fn(ctx, tx, &w, a)
	})
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

// ProcessorClockSkew is how far the processor's clock may be behind the
// service's: a payout of a withdrawal is dated at most this much before
// the withdrawal's creation.
const ProcessorClockSkew = time.Hour

// payoutsSince is the earliest date a payout of w can carry: the lookups
// by withdrawal id read the processor's list, newest first, back to there
// only.
func payoutsSince(w Withdrawal) time.Time { return w.CreatedAt.Add(-ProcessorClockSkew) }

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
	if w.BackendRef == nil || w.SubmitAttempts > 1 {
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

// raise raises an operator alert about w, logging a failure to do so.
func (s *Service) raise(ctx context.Context, idb bun.IDB, typ string, w Withdrawal, detail string) {
	if s.Alerts == nil {
		return
	}
	if _, _, err := s.Alerts.Raise(ctx, idb, alert.Params{Type: typ, Subject: w.ID.String(), Detail: detail}); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: raise alert", "withdrawal_id", w.ID, "alert_type", typ, "error", err)
	}
}
