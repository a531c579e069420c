package withdrawal

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"svc/platform/db"
)

// Concurrent auto-approved creations share their round trip and their
// commit. Under load, what a creation costs PostgreSQL beyond its own
// statements is a transaction's start and commit and a pipeline's round
// trip; createAuto's creations that arrive while autoInFlight pipelines are
// already running wait, and the next pipeline carries up to autoBatchMax
// of them:
//
//  1. each creation's reservation (BEGIN; withdrawal_reserve_auto; COMMIT),
//     one transaction each, as when it is alone;
//  2. then the holds, rows and keys' responses of all of them, as ONE
//     implicit transaction, ordered by user so that two such transactions
//     lock the users' accounts in the same order.
//
// Nothing is decided differently. A refusal of one reservation stops the
// pipeline there (PostgreSQL skips the rest up to the Sync): the
// creations reserved before it and those never reached are each decided
// alone afterwards, exactly as a creation whose first transaction was
// refused (the ordinary way) or whose second transaction failed (alone
// again, by insertApproved). When the shared transaction fails, for
// whichever creation (a short balance, a key another attempt holds), it
// undid all of them, and each is written again alone; only the one that
// caused it fails again, with its own answer. A pipeline whose outcome is
// unknown (the connection lost) is unknown for each of its creations, as
// for one alone.
//
// A lone creation, with nothing in flight, goes at once in a pipeline of
// its own: at low load nothing waits.

const (
	// autoBatchMax is the most creations one pipeline carries.
	autoBatchMax = 16
	// autoInFlight is how many pipelines of creations run at once; the
	// pool keeps the rest of its connections for everything else.
	autoInFlight = 4
	// autoBatchTimeout bounds a pipeline sent for creations that waited.
	autoBatchTimeout = 30 * time.Second
)

// autoItem is one creation handed to the batcher.
type autoItem struct {
	user    string
	reserve []*pgx.QueuedQuery // BEGIN; withdrawal_reserve_auto; COMMIT
	approve []*pgx.QueuedQuery // the hold, the row, the key's response
	read    func(br pgx.BatchResults) error

	// Set by the pipeline: reserved once its reservation committed; err
	// the first error met reading its reservation or, once reserved, the
	// shared transaction's; shared that the pipeline carried others.
	reserved bool
	err      error
	shared   bool
	done     chan struct{}
}

// autoBatcher queues the creations that wait for a pipeline.
type autoBatcher struct {
	mu       sync.Mutex
	waiting  []*autoItem
	inFlight int
}

// sendAuto runs it in a pipeline, alone or with others, and returns once
// its outcome is known.
func (s *Service) sendAuto(ctx context.Context, it *autoItem) {
	it.done = make(chan struct{})
	bt := &s.batcher
	bt.mu.Lock()
	if bt.inFlight >= autoInFlight {
		bt.waiting = append(bt.waiting, it)
		bt.mu.Unlock()
		<-it.done
		return
	}
	bt.inFlight++
	bt.mu.Unlock()
	s.runAuto(ctx, []*autoItem{it}, true)
}

// runAuto sends items in one pipeline, then hands the creations that
// waited meanwhile to a pipeline of their own. own is that ctx is the
// context of the only item's request.
func (s *Service) runAuto(ctx context.Context, items []*autoItem, own bool) {
	defer func() {
		for _, it := range items {
			close(it.done)
		}
		bt := &s.batcher
		bt.mu.Lock()
		defer bt.mu.Unlock()
		if len(bt.waiting) == 0 {
			bt.inFlight--
			return
		}
		n := min(len(bt.waiting), autoBatchMax)
		next := slices.Clone(bt.waiting[:n])
		bt.waiting = slices.Delete(bt.waiting, 0, n)
		go s.runAuto(context.WithoutCancel(ctx), next, false)
	}()
	if !own {
		// No single request's context may cancel a pipeline that carries
		// others (their outcomes would become unknown).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), autoBatchTimeout)
		defer cancel()
	}
	s.pipelineAuto(ctx, items)
}

// pipelineAuto sends the items' statements and records each one's outcome.
func (s *Service) pipelineAuto(ctx context.Context, items []*autoItem) {
	defer func() {
		if r := recover(); r != nil {
			// Whatever was sent may have committed: unknown, for each.
			s.log().ErrorContext(ctx, "withdrawal: shared creation pipeline panicked", "panic", r)
			for _, it := range items {
				it.err = fmt.Errorf("withdrawal: creation pipeline: panic: %v", r)
			}
		}
	}()
	slices.SortStableFunc(items, func(x, y *autoItem) int { return strings.Compare(x.user, y.user) })
	var b pgx.Batch
	for _, it := range items {
		it.shared = len(items) > 1
		b.QueuedQueries = append(b.QueuedQueries, it.reserve...)
	}
	for _, it := range items {
		b.QueuedQueries = append(b.QueuedQueries, it.approve...)
	}
	var shared error // the shared transaction's first error
	err := db.PipelineOnce(ctx, s.DB, &b, func(br pgx.BatchResults) error {
		for _, it := range items {
			it.err = readReservation(br)
			it.reserved = it.err == nil
		}
		for _, it := range items {
			if !it.reserved {
				continue
			}
			if err := it.read(br); err != nil && shared == nil {
				shared = err
			}
		}
		return shared
	})
	for _, it := range items {
		switch {
		case it.reserved && shared != nil:
			it.err = shared
		case it.reserved:
			// Reserved, and the shared transaction committed unless the
			// pipeline's end said otherwise.
			it.err = err
		case it.err == nil:
			// Never read: the pipeline failed before it.
			it.err = err
		}
	}
}

// readReservation reads the results of a reservation's three statements.
func readReservation(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	var total int64
	if err := br.QueryRow().Scan(&total); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	return nil
}
