package event_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/alert"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/platform/clock"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/queue"
)

// specDelays is the SPEC's schedule, written out here rather than taken
// from the code under test.
var specDelays = []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour,
	12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour}

func TestDeliveredOnAny2xx(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"ok", "204"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rcv := newReceiver(t, secret, b.fake.Now)
			rcv.setMode(mode)
			e := b.emit(t, event.DepositSettled, samples()[1])
			out, err := b.deliverer(rcv.URL(), 2*time.Second).Attempt(context.Background(), e.ID)
			require.NoError(t, err)
			require.Equal(t, event.OutcomeDelivered, out)

			got := b.get(t, e.ID)
			require.Equal(t, event.StatusDelivered, got.Status)
			require.Equal(t, 1, got.Attempts)
			require.NotNil(t, got.DeliveredAt)
			reqs, bad, _ := rcv.snapshot()
			require.Empty(t, bad)
			require.Len(t, reqs, 1)
			require.Equal(t, string(e.Payload), string(reqs[0].Body), "the stored bytes are what is sent")
			require.Equal(t, "application/json", reqs[0].ContentType)
			require.Regexp(t, `^t=\d+,v1=[0-9a-f]{64}$`, reqs[0].Signature)

			// Delivered is final: another job for it does nothing.
			out, err = b.deliverer(rcv.URL(), 2*time.Second).Attempt(context.Background(), e.ID)
			require.NoError(t, err)
			require.Equal(t, event.OutcomeSkipped, out)
			require.Equal(t, 1, rcv.count())
		})
	}
}

// TestEachFailureIsRetriedOnTheScheduleUntilDead drives ten attempts per
// failure mode with an injected clock and reads the schedule back from the
// database: next_attempt_at and the scheduled River job, after every
// failure; then dead, one alert, and nothing more.
func TestEachFailureIsRetriedOnTheScheduleUntilDead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    string
		lastErr string
	}{
		{"500", "HTTP 500: receiver broke"},
		{"400", "HTTP 400: receiver refuses"},
		{"timeout", "timeout: no answer within 300ms"},
		{"refused", "connection refused"},
		{"redirect", `HTTP 302: redirect to "/elsewhere" not followed`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			rcv := newReceiver(t, secret, b.fake.Now)
			rcv.setMode(tc.mode)
			url := rcv.URL()
			if tc.mode == "refused" {
				url = refusedURL(t)
			}
			d := b.deliverer(url, 300*time.Millisecond)
			e := b.emit(t, event.WithdrawalFailed, samples()[9])

			for n := 1; n <= event.MaxAttempts; n++ {
				at := b.fake.Now()
				out, err := d.Attempt(ctx, e.ID)
				require.NoError(t, err)
				got := b.get(t, e.ID)
				require.Equal(t, n, got.Attempts)
				require.NotNil(t, got.LastError)
				require.Contains(t, *got.LastError, tc.lastErr)
				if n == event.MaxAttempts {
					require.Equal(t, event.OutcomeDead, out)
					require.Equal(t, event.StatusDead, got.Status)
					require.NotNil(t, got.DeadAt)
					break
				}
				require.Equal(t, event.OutcomeRetry, out, "attempt %d", n)
				require.Equal(t, event.StatusPending, got.Status)
				next := at.Add(specDelays[n-1])
				require.True(t, got.NextAttemptAt.Equal(next), "attempt %d: next_attempt_at %s, want %s", n, got.NextAttemptAt, next)
				jobs := deliveryJobs(t, b.db.Bun, e.ID)
				last := jobs[len(jobs)-1]
				require.Equal(t, n+1, last.Attempt)
				require.Equal(t, "scheduled", last.State)
				require.True(t, last.ScheduledAt.Equal(next), "job for attempt %d scheduled at %s, want %s", n+1, last.ScheduledAt, next)

				// A job that runs early does nothing and spends nothing.
				b.fake.Advance(specDelays[n-1] - time.Second)
				out, err = d.Attempt(ctx, e.ID)
				require.NoError(t, err)
				require.Equal(t, event.OutcomeSkipped, out)
				require.Equal(t, n, b.get(t, e.ID).Attempts)
				b.fake.Advance(time.Second)
			}

			// Dead is final until an operator redelivers; exactly one alert.
			out, err := d.Attempt(ctx, e.ID)
			require.NoError(t, err)
			require.Equal(t, event.OutcomeSkipped, out)
			alerts, err := b.alerts.List(ctx, alert.ListParams{})
			require.NoError(t, err)
			require.Len(t, alerts, 1)
			require.Equal(t, event.AlertDead, alerts[0].Type)
			require.Equal(t, e.PublicID(), alerts[0].Subject)
			require.Contains(t, alerts[0].Detail, tc.lastErr)
			require.Contains(t, alerts[0].Detail, e.ID.String())
			require.Len(t, deliveryJobs(t, b.db.Bun, e.ID), event.MaxAttempts, "one job per attempt, none after the last")

			reqs, bad, redirects := rcv.snapshot()
			require.Empty(t, bad, "every delivery verifies with the receiver's own HMAC")
			require.Zero(t, redirects, "a redirect is never followed")
			if tc.mode == "refused" {
				require.Empty(t, reqs)
				return
			}
			require.Len(t, reqs, event.MaxAttempts)
			for _, r := range reqs {
				require.Equal(t, string(e.Payload), string(r.Body), "the body is stable across retries")
			}
		})
	}
}

func TestRedeliverStartsAFreshCycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rcv := newReceiver(t, secret, b.fake.Now)
	rcv.setMode("500")
	d := b.deliverer(rcv.URL(), time.Second)
	e := b.emit(t, event.DepositReviewRequired, samples()[2])
	kill := func() {
		for range event.MaxAttempts {
			_, err := d.Attempt(ctx, e.ID)
			require.NoError(t, err)
			b.fake.Advance(12 * time.Hour)
		}
		require.Equal(t, event.StatusDead, b.get(t, e.ID).Status)
	}
	kill()
	operator := audit.CLI("ops")

	// Only a dead event can be redelivered.
	other := b.emit(t, event.DepositExpired, samples()[4])
	_, err := b.events.Redeliver(ctx, other.ID, operator, nil)
	require.ErrorIs(t, err, event.ErrNotDead)
	_, err = b.events.Redeliver(ctx, [16]byte{1}, operator, nil)
	require.ErrorIs(t, err, event.ErrNotFound)

	re, err := b.events.Redeliver(ctx, e.ID, operator, nil)
	require.NoError(t, err)
	require.Equal(t, event.StatusPending, re.Status)
	require.Zero(t, re.Attempts)
	require.Equal(t, 1, re.Redeliveries)
	require.True(t, re.NextAttemptAt.Equal(b.fake.Now()))
	require.NotNil(t, re.LastError, "the last error stays until the next attempt")
	jobs := deliveryJobs(t, b.db.Bun, e.ID)
	require.Equal(t, "available", jobs[len(jobs)-1].State)
	require.Equal(t, 1, jobs[len(jobs)-1].Cycle)

	// The second cycle dies too: a second alert, for this cycle.
	kill()
	alerts, err := b.alerts.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Len(t, alerts, 2)
	require.Equal(t, e.PublicID()+" redelivery 1", alerts[0].Subject)

	_, err = b.events.Redeliver(ctx, e.ID, operator, nil)
	require.NoError(t, err)
	rcv.setMode("ok")
	out, err := d.Attempt(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, event.OutcomeDelivered, out)
	got := b.get(t, e.ID)
	require.Equal(t, event.StatusDelivered, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Nil(t, got.LastError, "the last attempt went well")
	_, err = b.events.Redeliver(ctx, e.ID, operator, nil)
	require.ErrorIs(t, err, event.ErrNotDead, "a delivered event was acknowledged")

	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, reqs, 2*event.MaxAttempts+1)
	for _, r := range reqs {
		require.Equal(t, string(e.Payload), string(r.Body))
	}

	// Each redelivery is in the audit trail; the refused ones are not.
	trail, _, err := audit.List(ctx, b.db.Bun, audit.ListParams{Action: audit.EventRedeliver})
	require.NoError(t, err)
	require.Len(t, trail, 2)
	for _, x := range trail {
		require.Equal(t, e.PublicID(), x.Target)
		require.Equal(t, "cli:ops", x.Actor)
		require.JSONEq(t, `{"event_id":"`+e.PublicID()+`"}`, string(x.Detail))
	}
}

func TestWithoutAURLEventsWaitAndThenDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ids []event.Event
	for _, d := range samples()[:4] {
		ids = append(ids, b.emit(t, d.Type(), d))
	}
	none := b.deliverer("", time.Second)
	for _, e := range ids {
		out, err := none.Attempt(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, event.OutcomeNoURL, out)
	}
	n, err := none.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	b.fake.Advance(30 * 24 * time.Hour)
	for _, e := range ids {
		got := b.get(t, e.ID)
		require.Equal(t, event.StatusPending, got.Status)
		require.Zero(t, got.Attempts, "no attempt is spent without a URL")
		require.Nil(t, got.LastError)
	}
	// The jobs inserted by Emit have run (and done nothing).
	_, err = b.db.Bun.ExecContext(ctx, "UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'event_deliver'")
	require.NoError(t, err)

	// A worker with a URL sweeps the backlog into the queue, once.
	rcv := newReceiver(t, secret, b.fake.Now)
	d := b.deliverer(rcv.URL(), time.Second)
	n, err = d.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	n, err = d.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "an event with a live job is not queued twice")
	for _, e := range ids {
		jobs := deliveryJobs(t, b.db.Bun, e.ID)
		require.Len(t, jobs, 2)
		require.Equal(t, "available", jobs[1].State)
		out, err := d.Attempt(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, event.OutcomeDelivered, out)
	}
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, reqs, len(ids))
}

func TestConcurrentAttemptsSendOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	d := b.deliverer(rcv.URL(), time.Second)
	e := b.emit(t, event.DepositDetected, samples()[0])
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[event.Outcome]int{}
	)
	for range 8 {
		wg.Go(func() {
			out, err := d.Attempt(context.Background(), e.ID)
			require.NoError(t, err)
			mu.Lock()
			outcomes[out]++
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, map[event.Outcome]int{event.OutcomeDelivered: 1, event.OutcomeSkipped: 7}, outcomes)
	require.Equal(t, 1, rcv.count())
}

func TestAClaimHeldByADeadWorkerExpires(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rcv := newReceiver(t, secret, b.fake.Now)
	d := b.deliverer(rcv.URL(), time.Second)
	e := b.emit(t, event.DepositDetected, samples()[0])
	_, err := b.db.Bun.ExecContext(ctx, "UPDATE river_job SET state = 'completed', finalized_at = now() WHERE kind = 'event_deliver'")
	require.NoError(t, err)
	// A worker claimed the event and died before recording anything.
	_, err = b.db.Bun.ExecContext(ctx, "UPDATE outbound_events SET claim_token = gen_random_uuid(), claimed_until = ? WHERE id = ?",
		b.fake.Now().Add(time.Second+time.Minute), e.ID)
	require.NoError(t, err)

	out, err := d.Attempt(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, event.OutcomeSkipped, out, "the claim is still held")
	n, err := d.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	b.fake.Advance(time.Second + time.Minute)
	n, err = d.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the sweep picks the event up once the claim has expired")
	out, err = d.Attempt(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, event.OutcomeDelivered, out)
}

func TestAStoppingWorkerSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	rcv.setMode("timeout")
	d := b.deliverer(rcv.URL(), 5*time.Second)
	e := b.emit(t, event.DepositDetected, samples()[0])
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for rcv.count() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := d.Attempt(ctx, e.ID)
	require.ErrorIs(t, err, context.Canceled)
	got := b.get(t, e.ID)
	require.Zero(t, got.Attempts)
	require.Equal(t, event.StatusPending, got.Status)
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events WHERE claim_token IS NOT NULL"), "the claim is released")
}

func TestAResponseBodyIsReadOnlyUpToACap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	rcv.setMode("big")
	e := b.emit(t, event.DepositDetected, samples()[0])
	out, err := b.deliverer(rcv.URL(), 2*time.Second).Attempt(context.Background(), e.ID)
	require.NoError(t, err)
	require.Equal(t, event.OutcomeRetry, out)
	last := *b.get(t, e.ID).LastError
	require.True(t, strings.HasPrefix(last, "HTTP 502: first line second\uFFFD xxx"), last)
	require.LessOrEqual(t, len([]rune(last)), 320)
	require.NotContains(t, last, "\x00")
}

// An attempt whose outcome cannot be recorded (the database went away
// after the event was sent: a restart, a failover) hands its claim back as
// soon as the database answers, so the job's retry delivers again at once
// instead of waiting a minute and more for the claim to expire.
func TestAnUnrecordedAttemptReleasesItsClaim(t *testing.T) {
	t.Parallel()
	b, owner := setupWithOwner(t)
	fake := b.fake
	rcv := newReceiver(t, secret, fake.Now)
	e := b.emit(t, event.DepositDetected, samples()[0])
	ctx := context.Background()

	// While the event is being sent, the runtime role loses the right to
	// record it, and gets it back a moment later.
	go func() {
		for rcv.count() == 0 {
			time.Sleep(time.Millisecond)
		}
		if _, err := owner.Bun.ExecContext(ctx, "REVOKE UPDATE ON outbound_events FROM "+dbtest.RuntimeRole); err != nil {
			t.Error(err)
		}
		time.Sleep(500 * time.Millisecond)
		if _, err := owner.Bun.ExecContext(ctx, "GRANT UPDATE ON outbound_events TO "+dbtest.RuntimeRole); err != nil {
			t.Error(err)
		}
	}()
	rcv.setMode("timeout")
	dl := b.deliverer(rcv.URL(), 300*time.Millisecond)
	_, err := dl.Attempt(ctx, e.ID)
	require.ErrorContains(t, err, "record delivery")
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events WHERE claim_token IS NOT NULL"), "the claim is released")

	rcv.setMode("ok")
	out, err := dl.Attempt(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, event.OutcomeDelivered, out, "the next attempt need not wait for the claim to expire")
}

// A sweep whose endpoint deliveries cannot be read (the runtime role lost
// its grant) still sweeps the platform URL's, and the backlog still counts
// the events: each part runs on its own (the backlog's two counts are two
// probes of the metrics, TestStateProbesAreIndependent in platform/metrics).
func TestSweepAndBacklogPartsAreIndependent(t *testing.T) {
	t.Parallel()
	b, owner := setupWithOwner(t)
	rcv := newReceiver(t, secret, b.fake.Now)
	e := b.emit(t, event.DepositSettled, samples()[1])
	ctx := context.Background()
	// Its job is lost: only the sweep queues it again.
	_, err := owner.Bun.ExecContext(ctx, "DELETE FROM river_job")
	require.NoError(t, err)
	// The runtime role can no longer read the endpoint deliveries.
	_, err = owner.Bun.ExecContext(ctx, "REVOKE SELECT, UPDATE ON webhook_deliveries FROM "+dbtest.RuntimeRole)
	require.NoError(t, err)

	n, err := b.deliverer(rcv.URL(), time.Second).Sweep(ctx)
	require.ErrorContains(t, err, "webhook_deliveries")
	require.Equal(t, 1, n)
	require.Len(t, deliveryJobs(t, b.db.Bun, e.ID), 1)

	bl, err := b.events.Backlog(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), bl.Pending)
	require.NotNil(t, bl.OldestPending)
	_, err = b.events.EndpointBacklog(ctx)
	require.ErrorContains(t, err, "webhook_deliveries")
}

// setupWithOwner is setup on a database of the test's own, with a
// connection as its owner, to take grants away from the runtime role.
func setupWithOwner(t *testing.T) (*bundle, *db.DB) {
	t.Helper()
	url := dbtest.NewURL(t)
	d, err := db.Open(context.Background(), url, 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	owner, err := db.Open(context.Background(), dbtest.OwnerURL(url), 2)
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	ins, err := queue.NewInserter(d.SQL, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	fake := clock.NewFake(time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC))
	return &bundle{db: d, fake: fake, ins: ins, events: &event.Service{DB: d.Bun, Inserter: ins, Now: fake.Now},
		alerts: &alert.Service{DB: d.Bun, Log: slog.New(slog.DiscardHandler), Now: fake.Now}}, owner
}

// The deliveries' client keeps a batch's connections to the receiver for
// the next batch: a second batch of batchSenders (16) sends at once dials
// none.
func TestABatchReusesTheLastBatchsConnections(t *testing.T) {
	t.Parallel()
	var dialled atomic.Int64
	release := make(chan struct{})
	var inFlight atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if inFlight.Add(1) == 16 {
			close(release)
		}
		<-release // all 16 at once: each on a connection of its own
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := event.NewHTTPClient(5 * time.Second)
	batch := func() {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Post(srv.URL, "application/json", strings.NewReader("{}"))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				require.NoError(t, err)
			}()
		}
		wg.Wait()
	}
	batch()
	require.Equal(t, int64(16), dialled.Load())
	batch() // every request of this one finds an idle connection: none waits for another
	require.Equal(t, int64(16), dialled.Load(), "the second batch dials no connection")
}
