package deposit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/platform/btcpay"
)

// Poll settings.
const (
	// PollBatch bounds the deposits one poll visits; open ones go first,
	// then the least recently polled, so a larger backlog is covered over
	// several runs.
	PollBatch = 500
	// pollParallel is how many deposits a poll reconciles at once.
	pollParallel = 4
	// creatingAge: a creating deposit younger than this is most likely
	// still being created by its request; the poller leaves it alone.
	creatingAge = 30 * time.Second
	// creatingGiveUp: a creating deposit whose invoice never appeared in
	// this long is left to its client's retry (which may still create it).
	creatingGiveUp = 24 * time.Hour
)

// PollResult says what one poll did.
type PollResult struct {
	Visited int
	Failed  int
}

// dueForPoll returns the deposits the poller reconciles: open ones
// (creating, pending, confirming) and settled, expired or review ones whose
// invoice the processor still monitors.
func (s *Service) dueForPoll(ctx context.Context, now time.Time) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := s.DB.NewSelect().Model((*Deposit)(nil)).Column("id").
		WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.
				Where("status IN (?)", bun.List([]Status{StatusPending, StatusConfirming})).
				WhereOr("status = ? AND created_at <= ? AND created_at > ?", StatusCreating, now.Add(-creatingAge), now.Add(-creatingGiveUp)).
				WhereOr("status IN (?) AND monitoring_until > ?", bun.List([]Status{StatusSettled, StatusExpired, StatusReview}), now)
		}).
		// Open deposits first (their users are waiting), then the least
		// recently polled.
		OrderExpr("status IN (?) DESC, polled_at NULLS FIRST, created_at, id",
			bun.List([]Status{StatusCreating, StatusPending, StatusConfirming})).
		Limit(PollBatch).Scan(ctx, &ids)
	if err != nil {
		return nil, fmt.Errorf("deposits due for polling: %w", err)
	}
	return ids, nil
}

// Poll reconciles every deposit due for polling (see dueForPoll) against
// the processor, a few at a time. A deposit that fails is logged and
// retried on the next poll; the others go on. When the processor is
// unreachable, the pass stops there and fails with that error (the job's
// failure is what the job log reports, folded over an outage): asking a
// processor that is down about every open deposit would only write one
// warning per deposit per pass and delay its recovery.
func (s *Service) Poll(ctx context.Context) (PollResult, error) {
	if s.Processor == nil {
		return PollResult{}, nil
	}
	ids, err := s.dueForPoll(ctx, s.now())
	if err != nil {
		return PollResult{}, err
	}
	var (
		mu          sync.Mutex
		res         = PollResult{Visited: len(ids)}
		unreachable error // the first call that found the processor down
		wg          sync.WaitGroup
		tokens      = make(chan struct{}, pollParallel)
		started     int
	)
	down := func() bool { mu.Lock(); defer mu.Unlock(); return unreachable != nil }
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		tokens <- struct{}{}
		if down() {
			<-tokens
			break
		}
		started++
		wg.Add(1)
		go func() {
			defer func() { <-tokens; wg.Done() }()
			err := s.Reconcile(ctx, id)
			if err == nil {
				return
			}
			mu.Lock()
			res.Failed++
			if errors.Is(err, btcpay.ErrUnreachable) {
				if unreachable == nil {
					unreachable = err
				}
				mu.Unlock()
				return
			}
			mu.Unlock()
			s.log().WarnContext(ctx, "deposit: poll could not reconcile", "deposit_id", id, "error", err)
		}()
	}
	wg.Wait()
	if unreachable != nil {
		return res, fmt.Errorf("poll deposits: processor unreachable, pass stopped after %d of %d deposits: %w", started, len(ids), unreachable)
	}
	return res, ctx.Err()
}
