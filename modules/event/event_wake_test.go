package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/platform/db"
)

// wakeJobs returns the event ids of every wake job, one slice per job, in
// insertion order.
func wakeJobs(t testing.TB, idb bun.IDB) [][]uuid.UUID {
	t.Helper()
	var raw []string
	require.NoError(t, idb.NewRaw(`SELECT args::text FROM river_job WHERE kind = 'event_deliver_batch' ORDER BY id`).
		Scan(context.Background(), &raw))
	out := make([][]uuid.UUID, len(raw))
	for i, r := range raw {
		var a event.DeliverBatchArgs
		require.NoError(t, json.Unmarshal([]byte(r), &a))
		out[i] = a.EventIDs
	}
	return out
}

// hourWaker is the service's Waker, waiting an hour: only Close or a full
// batch wakes.
func hourWaker(b *bundle) *event.Waker {
	w := event.NewWaker(b.ins, nil)
	w.Delay = time.Hour
	return w
}

func sortedIDs(ids []uuid.UUID) []uuid.UUID {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	return ids
}

// With a Waker, a transaction of db.RunInTx writes the event's row and no
// job; what commits is woken in one job after the commit, and what rolls
// back never is.
func TestAWakerWakesWhatCommittedInOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := hourWaker(b) // flushed by Close below
	s := &event.Service{DB: b.db.Bun, Inserter: b.ins, Now: b.fake.Now, Waker: w}

	var committed []uuid.UUID
	for _, d := range samples()[:3] {
		committed = append(committed, emitWith(t, b.db.Bun, s, d.Type(), d).ID)
	}
	boom := errors.New("the state change failed")
	err := db.RunInTx(context.Background(), b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
		if _, err := s.Emit(ctx, tx, event.DepositExpired, samples()[4]); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)

	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM river_job"), "no job inside the transactions")
	require.Empty(t, wakeJobs(t, b.db.Bun), "nothing woken before the delay")
	w.Close()
	jobs := wakeJobs(t, b.db.Bun)
	require.Len(t, jobs, 1)
	require.Equal(t, sortedIDs(committed), sortedIDs(jobs[0]))
	require.Equal(t, 3, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events"))
}

// Outside db.RunInTx and db.BatchTx (a transaction begun by hand) there is
// no commit to wait for: the event gets its own job in its transaction.
func TestWithoutCommitHooksTheEventHasItsOwnJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := hourWaker(b)
	s := &event.Service{DB: b.db.Bun, Inserter: b.ins, Now: b.fake.Now, Waker: w}
	ctx := context.Background()
	tx, err := b.db.Bun.BeginTx(ctx, nil)
	require.NoError(t, err)
	e, err := s.Emit(ctx, tx, event.DepositSettled, samples()[1])
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	w.Close()
	require.Len(t, deliveryJobs(t, b.db.Bun, e.ID), 1)
	require.Empty(t, wakeJobs(t, b.db.Bun))
}

// WakeAfter, for a row committed in a pipeline of its own: the wake it
// returns wakes the event through the Waker, with no job of its own;
// without a Waker there is none, and the caller inserts the job itself.
func TestWakeAfterWakesThroughTheWaker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := hourWaker(b)
	s := &event.Service{DB: b.db.Bun, Inserter: b.ins, Now: b.fake.Now, Waker: w}
	e, err := s.Prepare(event.DepositSettled, samples()[1])
	require.NoError(t, err)
	stmt, args := e.RowInsert(1)
	_, err = db.Exec(context.Background(), b.db.Bun, stmt, args...)
	require.NoError(t, err)
	wake, ok := s.WakeAfter(context.Background(), e)
	require.True(t, ok)
	wake()
	w.Close()
	require.Equal(t, [][]uuid.UUID{{e.ID}}, wakeJobs(t, b.db.Bun))
	require.Empty(t, deliveryJobs(t, b.db.Bun, e.ID))

	_, ok = (&event.Service{DB: b.db.Bun, Inserter: b.ins, Now: b.fake.Now}).WakeAfter(context.Background(), e)
	require.False(t, ok, "no Waker: the event needs its own job")
}

// A Waker that gathers its maximum wakes at once, without waiting for the
// delay; what gathers while that insert is in flight goes in the next
// ones, each at most the maximum, every id once and in order.
func TestAWakerWakesAFullBatchAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := hourWaker(b)
	var ids []uuid.UUID
	for range 250 {
		id := uuid.New()
		ids = append(ids, id)
		w.Add(id)
	}
	require.Equal(t, 64, w.Max)
	require.Eventually(t, func() bool { return len(wakeJobs(t, b.db.Bun)) >= 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, ids[:64], wakeJobs(t, b.db.Bun)[0], "the first 64 at once")
	// Full jobs go at once; the rest, 58, waits for the delay (or Close)
	// to gather more, so that a burst makes full jobs.
	require.Eventually(t, func() bool { return len(wakeJobs(t, b.db.Bun)) == 3 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Len(t, wakeJobs(t, b.db.Bun), 3)
	w.Close()
	var all []uuid.UUID
	for _, j := range wakeJobs(t, b.db.Bun) {
		require.LessOrEqual(t, len(j), 64)
		all = append(all, j...)
	}
	require.Equal(t, ids, all)
}

// After Close (the process shutting down) an Add does nothing, not even
// later: the row's sweep finds it.
func TestAClosedWakerWakesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := event.NewWaker(b.ins, nil)
	w.Delay = 10 * time.Millisecond
	w.Add(uuid.New())
	w.Close()
	require.Len(t, wakeJobs(t, b.db.Bun), 1)
	w.Add(uuid.New())
	time.Sleep(100 * time.Millisecond)
	require.Len(t, wakeJobs(t, b.db.Bun), 1)
}

// A wake that is lost (the process killed between the commit and the
// flush) loses nothing: the event is pending and due, and the sweep queues
// its delivery.
func TestALostWakeIsSweptUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	w := hourWaker(b) // never flushed: the process died
	s := &event.Service{DB: b.db.Bun, Inserter: b.ins, Now: b.fake.Now, Waker: w}
	e := emitWith(t, b.db.Bun, s, event.DepositSettled, samples()[1])
	require.Empty(t, deliveryJobs(t, b.db.Bun, e.ID))

	n, err := b.deliverer(rcv.URL(), time.Second).Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	jobs := deliveryJobs(t, b.db.Bun, e.ID)
	require.Len(t, jobs, 1)
	require.Equal(t, 1, jobs[0].Attempt)
}

// An event a live wake job names is not swept into a job of its own: behind
// a backlog of wake jobs every event would get a second job.
func TestASweepLeavesWhatAWakeJobNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	w := hourWaker(b)
	s := &event.Service{DB: b.db.Bun, Inserter: b.ins, Now: b.fake.Now, Waker: w}
	woken := emitWith(t, b.db.Bun, s, event.DepositSettled, samples()[1])
	w.Close() // its wake job waits, with no worker to run it
	lost := emitWith(t, b.db.Bun, s, event.DepositExpired, samples()[4])

	n, err := b.deliverer(rcv.URL(), time.Second).Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, deliveryJobs(t, b.db.Bun, woken.ID))
	require.Len(t, deliveryJobs(t, b.db.Bun, lost.ID), 1)
}

// AttemptBatch sends each pending event once, skips what is not pending
// or unknown, records the deliveries, and records each failure with its
// next attempt's job, as Attempt does.
func TestAttemptBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	d := b.deliverer(rcv.URL(), 2*time.Second)
	ctx := context.Background()

	e1 := b.emit(t, event.DepositDetected, samples()[0])
	e2 := b.emit(t, event.DepositSettled, samples()[1])
	e3 := b.emit(t, event.DepositExpired, samples()[4])
	out, err := d.Attempt(ctx, e3.ID)
	require.NoError(t, err)
	require.Equal(t, event.OutcomeDelivered, out)

	outcomes, err := d.AttemptBatch(ctx, []uuid.UUID{e1.ID, e2.ID, e3.ID, uuid.New()}, "")
	require.NoError(t, err)
	require.Equal(t, map[event.Outcome]int{event.OutcomeDelivered: 2, event.OutcomeSkipped: 2}, outcomes)
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, reqs, 3, "e3 once, by its own attempt; e1 and e2 once each")
	var bodies []string
	for _, r := range reqs[1:] {
		bodies = append(bodies, string(r.Body))
	}
	require.ElementsMatch(t, []string{string(e1.Payload), string(e2.Payload)}, bodies, "the stored bytes are what is sent")
	for _, e := range []event.Event{e1, e2} {
		got := b.get(t, e.ID)
		require.Equal(t, event.StatusDelivered, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.NotNil(t, got.DeliveredAt)
	}

	// Failures: each recorded with its next attempt a minute later.
	rcv.setMode("500")
	e4 := b.emit(t, event.WithdrawalBroadcast, samples()[6])
	e5 := b.emit(t, event.WithdrawalCompleted, samples()[7])
	start := b.fake.Now()
	outcomes, err = d.AttemptBatch(ctx, []uuid.UUID{e4.ID, e5.ID}, "")
	require.NoError(t, err)
	require.Equal(t, map[event.Outcome]int{event.OutcomeRetry: 2}, outcomes)
	for _, e := range []event.Event{e4, e5} {
		got := b.get(t, e.ID)
		require.Equal(t, event.StatusPending, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.NotNil(t, got.LastError)
		require.True(t, got.NextAttemptAt.Equal(start.Truncate(time.Microsecond).Add(time.Minute)), "next attempt %s", got.NextAttemptAt)
		jobs := deliveryJobs(t, b.db.Bun, e.ID)
		require.Equal(t, 2, jobs[len(jobs)-1].Attempt, "the next attempt's job")
	}
	// Not due yet: a batch skips them.
	outcomes, err = d.AttemptBatch(ctx, []uuid.UUID{e4.ID, e5.ID}, "")
	require.NoError(t, err)
	require.Equal(t, map[event.Outcome]int{event.OutcomeSkipped: 2}, outcomes)
}

// Batches that race over the same events send each once.
func TestConcurrentBatchesSendOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	d := b.deliverer(rcv.URL(), 2*time.Second)
	var ids []uuid.UUID
	for _, s := range samples() {
		ids = append(ids, b.emit(t, s.Type(), s).ID)
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		delivered int
	)
	for range 4 {
		wg.Go(func() {
			out, err := d.AttemptBatch(context.Background(), ids, "")
			require.NoError(t, err)
			mu.Lock()
			delivered += out[event.OutcomeDelivered]
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, len(ids), delivered)
	require.Equal(t, len(ids), rcv.count())
}

// A batch whose job ends while some of its sends wait records the ones
// answered and hands back the others without spending their attempt.
func TestABatchCutShortRecordsWhatWasAnswered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var slow atomic.Value
	slow.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if id := slow.Load().(string); id != "" && strings.Contains(string(body), id) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		if strings.Contains(string(body), "deposit.expired") {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	d := b.deliverer(srv.URL, 5*time.Second)
	ok := b.emit(t, event.DepositDetected, samples()[0])
	failing := b.emit(t, event.DepositExpired, samples()[4])
	hanging := b.emit(t, event.DepositSettled, samples()[1])
	slow.Store(hanging.PublicID())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	outcomes, err := d.AttemptBatch(ctx, []uuid.UUID{ok.ID, failing.ID, hanging.ID}, "")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, map[event.Outcome]int{event.OutcomeDelivered: 1, event.OutcomeRetry: 1}, outcomes)
	require.Equal(t, event.StatusDelivered, b.get(t, ok.ID).Status)
	f := b.get(t, failing.ID)
	require.Equal(t, 1, f.Attempts)
	require.Len(t, deliveryJobs(t, b.db.Bun, failing.ID), 2, "its own first job (no Waker here) and its retry's")
	h := b.get(t, hanging.ID)
	require.Equal(t, event.StatusPending, h.Status)
	require.Zero(t, h.Attempts, "cut short: no attempt spent")
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events WHERE claim_token IS NOT NULL"))
}

// A batch whose worker stops mid-flight spends no attempt and holds no
// claim: the job's retry sends at once.
func TestAStoppingBatchSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	rcv.setMode("timeout")
	d := b.deliverer(rcv.URL(), 5*time.Second)
	e1 := b.emit(t, event.DepositDetected, samples()[0])
	e2 := b.emit(t, event.DepositSettled, samples()[1])
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := d.AttemptBatch(ctx, []uuid.UUID{e1.ID, e2.ID}, "")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, e := range []event.Event{e1, e2} {
		got := b.get(t, e.ID)
		require.Equal(t, event.StatusPending, got.Status)
		require.Zero(t, got.Attempts)
	}
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events WHERE claim_token IS NOT NULL"))
}
