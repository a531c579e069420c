package withdrawal

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/platform/btcpay"
	"svc/platform/db"
)

// The payout work carries an approved BTC or BTC_LN withdrawal to
// confirmed through the processor's payouts, with at most one payout per
// withdrawal whatever crashes, timeouts and duplicate deliveries happen.
// USDT_TRC20 is never handed to the processor (its plugin has no
// payouts): an operator sends it (withdrawal_usdt.go).
//
// This file holds the passes that drive it; each step has a file of its
// own, whose comment tells it: the submission
// (withdrawal_payout_submit.go), the tracking to confirmed or failed
// (withdrawal_payout_track.go), the Lightning deadline
// (withdrawal_payout_lightning.go), and what guards and follows a
// release (withdrawal_payout_release.go).
//
// # Passes
//
// A pass (ProcessPayouts, every PAYOUT_POLL_INTERVAL) lists what is due
// in batches, oldest first, and goes on to the next batch for up to
// submitBudget; it works payoutLanes withdrawals at once, a destination's
// withdrawals in one lane and in order. A submission the processor
// accepts is followed at once from the processor's answer, so that a
// processor that pays at once is seen without another read.

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
	// DefaultPayoutBatch bounds the withdrawals one pass lists at a time
	// (Config.PayoutBatch).
	DefaultPayoutBatch = 200
	// payoutLanes is how many withdrawals a pass works at once (payout
	// calls and their transactions; each lane holds at most one database
	// connection at a time).
	payoutLanes = 4
)

// DefaultSubmitBudget is how long a pass goes on taking batches of due
// withdrawals (Config.SubmitBudget): a backlog larger than that is taken
// up by the next pass, which runs PAYOUT_POLL_INTERVAL later, and the
// pass's tracking of open payouts is not held back by it. Well under the
// job's timeout (queue.LongestJobTimeout).
const DefaultSubmitBudget = 30 * time.Second

func (s *Service) payoutBatch() int {
	if s.Config.PayoutBatch > 0 {
		return s.Config.PayoutBatch
	}
	return DefaultPayoutBatch
}

func (s *Service) submitBudget() time.Duration {
	if s.Config.SubmitBudget > 0 {
		return s.Config.SubmitBudget
	}
	return DefaultSubmitBudget
}

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
	var last *Withdrawal
	for {
		// Whole rows: each is claimed as read (submitRow), without reading
		// it again.
		q := s.DB.NewSelect().Model((*Withdrawal)(nil)).
			Where("asset IN (?) AND status IN (?)", bun.List(processorAssets), bun.List([]Status{StatusApproved, StatusSubmitting})).
			Where("next_attempt_at IS NULL OR next_attempt_at <= ?", now).
			// Nothing of an asset reconciliation found insolvent is
			// submitted (a claimed one already in the processor's hands is
			// resumed).
			Where("status = ? OR asset NOT IN (SELECT asset FROM assets WHERE withdrawals_halted_since IS NOT NULL)", StatusSubmitting)
		if last != nil {
			q = q.Where("(created_at, id) > (?, ?)", last.CreatedAt, last.ID)
		}
		var due []Withdrawal
		if err := q.OrderExpr("created_at, id").Limit(int64(s.payoutBatch())).Scan(ctx, &due); err != nil {
			return fmt.Errorf("list withdrawals to submit: %w", err)
		}
		// One destination's withdrawals in one lane, in order: the
		// processor refuses a second open payout to an address
		// (duplicate-destination), and the older withdrawal goes first.
		ids := make([]uuid.UUID, len(due))
		rows := make(map[uuid.UUID]Withdrawal, len(due))
		for i, d := range due {
			ids[i], rows[d.ID] = d.ID, d
		}
		s.inLanes(ctx, "submit payout", ids, func(i int) string { return due[i].Destination },
			func(ctx context.Context, id uuid.UUID) error { return s.submitRow(ctx, rows[id]) })
		if len(due) < s.payoutBatch() || time.Since(started) > s.submitBudget() {
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
			Where("id > ?", after).OrderExpr("id").Limit(int64(s.payoutBatch())).Scan(ctx, &page); err != nil {
			return fmt.Errorf("list open payouts: %w", err)
		}
		s.track(ctx, page)
		if len(page) < s.payoutBatch() {
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
		Where("id > ?", after).OrderExpr("id").Limit(int64(s.payoutBatch())).Scan(ctx, &page); err != nil {
		return fmt.Errorf("list failed payouts: %w", err)
	}
	s.track(ctx, page)
	s.failedMu.Lock()
	s.failedAfter = uuid.Nil
	if len(page) == s.payoutBatch() {
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

// ProcessorClockSkew is how far the processor's clock may be behind the
// service's: a payout of a withdrawal is dated at most this much before
// the withdrawal's creation.
const ProcessorClockSkew = time.Hour

// payoutsSince is the earliest date a payout of w can carry: the lookups
// by withdrawal id read the processor's list, newest first, back to there
// only.
func payoutsSince(w Withdrawal) time.Time { return w.CreatedAt.Add(-ProcessorClockSkew) }

// raise raises an operator alert about w, logging a failure to do so; it
// reports whether the alert is recorded.
func (s *Service) raise(ctx context.Context, idb bun.IDB, typ string, w Withdrawal, detail string) bool {
	if s.Alerts == nil {
		return false
	}
	if _, _, err := s.Alerts.Raise(ctx, idb, alert.Params{Type: typ, Subject: w.ID.String(), Detail: detail}); err != nil {
		s.log().ErrorContext(ctx, "withdrawal: raise alert", "withdrawal_id", w.ID, "alert_type", typ, "error", err)
		return false
	}
	return true
}

// unrecordedPayoutPossible reports whether a payout of w the service has
// not recorded may exist at the processor: none recorded after an
// attempt, or more than one attempt made. Such a withdrawal's payouts are
// looked up by its id (payoutLive before a release, latePayout after).
func unrecordedPayoutPossible(w Withdrawal) bool {
	return w.BackendRef == nil || w.SubmitAttempts > 1
}
