package event_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"svc/modules/alert"
	"svc/modules/event"
	"svc/platform/dbtest"
	"svc/platform/queue"
	"svc/platform/queue/queuetest"
)

// TestADeadWorkersEventClaimIsReleasedWithItsJob: a worker dies while it
// delivers an event (the receiver holds its request open; the delivery
// timeout is 30 s, as PLATFORM_WEBHOOK_TIMEOUT may be). The live worker
// that finds it dead frees its claim on the event along with its job, and
// delivers the event within seconds: not once the claim lapses, the
// timeout plus a minute later.
func TestADeadWorkersEventClaimIsReleasedWithItsJob(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	ins, err := queue.NewInserter(d.SQL, log)
	require.NoError(t, err)

	// The receiver holds the first request until the test ends and answers
	// every later one at once.
	var requests atomic.Int64
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)

	dl := &event.Deliverer{DB: d.Bun, Inserter: ins, Alerts: &alert.Service{DB: d.Bun, Log: log, Now: time.Now},
		Now: time.Now, Log: log, URL: srv.URL + "/hook", Secret: []byte(secret), Timeout: 30 * time.Second}
	workers := river.NewWorkers()
	river.AddWorker(workers, &event.DeliverWorker{Deliverer: dl})
	// startWorker starts a worker process: its River client and its
	// liveness, which a cancel of the returned context ends (the process
	// died: PostgreSQL frees its liveness lock).
	startWorker := func(concurrency int) (*river.Client[pgx.Tx], context.CancelFunc) {
		c, err := queue.NewWorker(d.Pool, queue.WorkerParams{Workers: workers, Concurrency: concurrency, Log: log,
			FetchPollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		queuetest.Start(t, c, 10*time.Second)
		live, die := context.WithCancel(ctx)
		t.Cleanup(die)
		go queue.DeadWorkerRescue{Pool: d.Pool, ClientID: c.ID(), Every: 100 * time.Millisecond, Grace: time.Second, Log: log,
			Release: []func(context.Context, time.Duration) (int64, error){dl.ReleaseDeadClaims}}.Run(live)
		return c, die
	}

	// One slot: once its delivery hangs, the dying worker takes no other job.
	first, kill := startWorker(1)
	t.Cleanup(func() { close(hold) }) // first of the cleanups: the held request ends
	e := emitWith(t, d.Bun, &event.Service{DB: d.Bun, Inserter: ins, Now: time.Now}, event.DepositSettled, samples()[1])
	require.Eventually(t, func() bool { return requests.Load() == 1 }, 10*time.Second, 10*time.Millisecond, "the first worker sends the event")
	var claimedBy string
	require.NoError(t, d.Bun.NewRaw("SELECT claimed_by FROM outbound_events WHERE id = ?", e.ID).Scan(ctx, &claimedBy))
	require.Equal(t, first.ID(), claimedBy, "the claim names the worker that holds it")

	kill()
	killed := time.Now()
	startWorker(2)
	require.Eventually(t, func() bool {
		got, err := (&event.Service{DB: d.Bun, Now: time.Now}).Get(ctx, e.ID)
		return err == nil && got.Status == event.StatusDelivered
	}, 20*time.Second, 50*time.Millisecond, "the event is delivered within seconds of the worker's death, not once its 90 s claim lapses")
	t.Logf("delivered %s after the worker died", time.Since(killed).Round(100*time.Millisecond))
	require.EqualValues(t, 2, requests.Load(), "the live worker sent it once more")
	got, err := (&event.Service{DB: d.Bun, Now: time.Now}).Get(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts, "the dead worker's attempt spent nothing")
	require.Equal(t, 0, countRows(t, d.Bun, "SELECT count(*) FROM outbound_events WHERE claim_token IS NOT NULL OR claimed_by IS NOT NULL"))
}
