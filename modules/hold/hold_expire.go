package hold

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ExpireEvery is how often the expiry pass runs: an open hold is returned
// within a minute of its expires_at (plus the pass's own time).
const ExpireEvery = 30 * time.Second

// ExpireBatch is how many due holds the pass reads at a time.
const ExpireBatch = 100

// Expire returns every open hold whose expires_at has passed: each in its
// own short transaction (settle: the row locked, escrow_release of the
// whole amount, expired, hold.expired), so that a hold is never half done
// and the pass holds no lock for long. A hold captured or voided meanwhile
// is skipped (it is no longer open); one that fails is logged and left to
// the next pass. It walks the due holds in (expires_at, id) order, in
// batches, and returns how many it expired.
func (s *Service) Expire(ctx context.Context) (int, error) {
	now := s.now()
	var (
		n       int
		afterAt time.Time
		afterID uuid.UUID
		failed  error
	)
	for {
		var due []struct {
			ID        uuid.UUID `bun:"id"`
			ExpiresAt time.Time `bun:"expires_at"`
		}
		q := s.DB.NewSelect().Model((*Hold)(nil)).Column("id", "expires_at").
			Where("status = ?", string(StatusOpen)).Where("expires_at <= ?", now)
		if afterID != uuid.Nil {
			q = q.Where("(expires_at, id) > (?, ?)", afterAt, afterID)
		}
		if err := q.OrderExpr("expires_at, id").Limit(ExpireBatch).Scan(ctx, &due); err != nil {
			return n, fmt.Errorf("hold: read due holds: %w", err)
		}
		for _, d := range due {
			afterAt, afterID = d.ExpiresAt, d.ID
			_, _, err := s.settle(ctx, d.ID, Expire, nil, s.expireStep(now))
			switch {
			case err == nil:
				n++
			case errors.Is(err, ErrIllegalTransition), errors.Is(err, errNotDue):
				// Captured or voided since it was read: nothing to do.
			case ctx.Err() != nil:
				return n, ctx.Err()
			default:
				s.log().WarnContext(ctx, "hold: expiry failed; the next pass retries", "hold_id", d.ID, "error", err)
				failed = err
			}
		}
		if len(due) < ExpireBatch {
			break
		}
	}
	if n > 0 {
		s.log().InfoContext(ctx, "hold: expired holds returned to their payers", "count", n)
	}
	return n, failed
}

// errNotDue: the hold's expiry is after the pass's time (never, since
// expires_at does not change; kept as the step's own guard).
var errNotDue = errors.New("hold: not due")

// expireStep is release, refused for a hold not yet due at now.
func (s *Service) expireStep(now time.Time) func(h Hold) (step, error) {
	rel := release("escrow hold expired")
	return func(h Hold) (step, error) {
		if h.ExpiresAt.After(now) {
			return step{}, errNotDue
		}
		return rel(h)
	}
}
