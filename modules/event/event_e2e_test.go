package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app"
	"svc/cmd/svc/app/apptest"
	"svc/modules/alert"
	"svc/modules/event"
	"svc/modules/event/eventtest"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/queue"
	"svc/platform/queue/queuetest"
)

func withWebhook(url string, timeout time.Duration) apptest.Option {
	return apptest.WithConfig(func(c *config.Config) {
		c.Webhooks.URL, c.Webhooks.Secret, c.Webhooks.Timeout = url, secret, timeout
	})
}

type eventList struct {
	Events []event.Record `json:"events"`
}

func listEvents(t *testing.T, e *apptest.Env, query string) []event.Record {
	t.Helper()
	l := okBody[eventList](t, e.AdminGet("/v1/admin/events"+query))
	require.NotNil(t, l.Events, "an empty list is [], not null")
	return l.Events
}

func TestWebhooksAreSignedAndDeliveredEndToEnd(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	rcv := newReceiver(t, secret, fake.Now)
	e := apptest.New(t, apptest.WithClock(fake), withWebhook(rcv.URL(), 2*time.Second), apptest.WithWorker())

	emitted := map[string]event.Event{}
	for _, d := range samples() {
		ev := emitWith(t, e.App.DB.Bun, e.App.Events, d.Type(), d)
		emitted[ev.PublicID()] = ev
	}
	apptest.Eventually(t, 20*time.Second, func() bool { return rcv.count() == len(emitted) }, "every event delivered")

	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad, "every signature verifies with the receiver's own HMAC")
	for _, r := range reqs {
		require.Equal(t, "application/json", r.ContentType)
		eventtest.RequireValid(t, r.Body)
		var body struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &body))
		ev, ok := emitted[body.ID]
		require.True(t, ok, "unknown id %s", body.ID)
		require.Equal(t, string(ev.Payload), string(r.Body))
	}

	apptest.Eventually(t, 10*time.Second, func() bool {
		return len(listEvents(t, e, "?status=delivered&limit=200")) == len(emitted)
	}, "every event recorded as delivered")
	for _, rec := range listEvents(t, e, "?limit=200") {
		ev := emitted[rec.ID]
		require.Equal(t, ev.ID.String(), rec.RawID)
		require.Equal(t, "evt_"+strings.ReplaceAll(rec.RawID, "-", ""), rec.ID)
		require.Equal(t, event.StatusDelivered, rec.Status)
		require.Equal(t, 1, rec.Attempts)
		require.Nil(t, rec.LastError)
		require.JSONEq(t, string(ev.Payload), string(rec.Payload))
		require.Equal(t, ev.Type, rec.Type)
	}
	require.Equal(t, len(emitted), eventtest.RequireAllValid(t, e.App.DB.Bun))
}

// TestRetryScheduleThroughTheWorker runs every attempt through River and the
// real worker: after each failure the test reads next_attempt_at and the
// scheduled job from the database, moves the injected clock to that time
// and lets River run the job (rather than sleeping through real hours).
func TestRetryScheduleThroughTheWorker(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	rcv := newReceiver(t, secret, fake.Now)
	rcv.setMode("500")
	e := apptest.New(t, apptest.WithClock(fake), withWebhook(rcv.URL(), 2*time.Second), apptest.WithWorker())
	ctx := context.Background()
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.WithdrawalPendingApproval, samples()[5])

	// The first attempt is woken after the commit (event.Waker); each
	// failure schedules the next attempt's own job.
	for n := 1; n <= event.MaxAttempts; n++ {
		apptest.Eventually(t, 20*time.Second, func() bool {
			got, err := e.App.Events.Get(ctx, ev.ID)
			require.NoError(t, err)
			return got.Attempts == n && (n == event.MaxAttempts || len(deliveryJobs(t, e.App.DB.Bun, ev.ID)) == n)
		}, fmt.Sprintf("attempt %d recorded", n))
		got, err := e.App.Events.Get(ctx, ev.ID)
		require.NoError(t, err)
		require.Contains(t, *got.LastError, "HTTP 500")
		if n == event.MaxAttempts {
			require.Equal(t, event.StatusDead, got.Status)
			break
		}
		next := fake.Now().Truncate(time.Microsecond).Add(specDelays[n-1])
		require.True(t, got.NextAttemptAt.Equal(next), "after attempt %d: next_attempt_at %s, want %s", n, got.NextAttemptAt, next)
		jobs := deliveryJobs(t, e.App.DB.Bun, ev.ID)
		j := jobs[len(jobs)-1]
		require.Equal(t, "scheduled", j.State)
		require.True(t, j.ScheduledAt.Equal(next))
		require.Equal(t, n, rcv.count(), "no attempt before its time")

		fake.Set(next)
		_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE river_job SET state = 'available', scheduled_at = now() WHERE id = ? AND state = 'scheduled'", j.ID)
		require.NoError(t, err)
	}

	alerts, err := e.App.Alerts.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Len(t, alerts, 1, "one operator alert")
	require.Equal(t, event.AlertDead, alerts[0].Type)
	dead := listEvents(t, e, "?status=dead")
	require.Len(t, dead, 1)
	require.Equal(t, event.MaxAttempts, dead[0].Attempts)

	// The platform is fixed; the operator redelivers; the worker delivers.
	rcv.setMode("ok")
	r := e.AdminPost("/v1/admin/events/"+ev.ID.String()+"/redeliver", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, map[string]any{"id": ev.PublicID(), "status": "pending"}, r.Map(t))
	apptest.Eventually(t, 20*time.Second, func() bool {
		got, err := e.App.Events.Get(ctx, ev.ID)
		require.NoError(t, err)
		return got.Status == event.StatusDelivered
	}, "redelivered event delivered")

	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, reqs, event.MaxAttempts+1)
	for _, req := range reqs {
		require.Equal(t, string(ev.Payload), string(req.Body))
	}
	alerts, err = e.App.Alerts.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Len(t, alerts, 1, "still one alert")
}

func TestAdminEventsListAndRedeliver(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	rcv := newReceiver(t, secret, fake.Now)
	rcv.setMode("500")
	e := apptest.New(t, apptest.WithClock(fake), withWebhook(rcv.URL(), 2*time.Second))
	ctx := context.Background()

	var evs []event.Event
	for _, d := range samples()[:3] {
		evs = append(evs, emitWith(t, e.App.DB.Bun, e.App.Events, d.Type(), d))
		fake.Advance(time.Second)
	}
	oldest := evs[0]
	for range event.MaxAttempts {
		_, err := e.App.Deliverer.Attempt(ctx, oldest.ID)
		require.NoError(t, err)
		fake.Advance(12 * time.Hour)
	}

	all := listEvents(t, e, "")
	require.Len(t, all, 3)
	require.Equal(t, []string{evs[2].PublicID(), evs[1].PublicID(), evs[0].PublicID()}, []string{all[0].ID, all[1].ID, all[2].ID}, "newest first")
	require.Equal(t, event.StatusDead, all[2].Status)
	require.Equal(t, 10, all[2].Attempts)
	require.Contains(t, *all[2].LastError, "HTTP 500")

	for query, want := range map[string]int{"?status=dead": 1, "?status=pending": 2, "?status=delivered": 0, "?limit=1": 1, "?limit=200": 3, "?status=": 3} {
		require.Len(t, listEvents(t, e, query), want, query)
	}
	require.Equal(t, evs[2].PublicID(), listEvents(t, e, "?limit=1")[0].ID)

	for _, q := range []string{"?status=bogus", "?status=DEAD", "?limit=0", "?limit=201", "?limit=abc", "?limit=", "?status=x&limit=0"} {
		r := e.AdminGet("/v1/admin/events" + q)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, q)
		var body struct {
			Detail []map[string]any `json:"detail"`
		}
		r.JSON(t, &body)
		require.NotEmpty(t, body.Detail, q)
	}
	require.Len(t, e.AdminGet("/v1/admin/events?status=x&limit=0").Map(t)["detail"], 2, "both problems at once")
	require.Equal(t, http.StatusForbidden, e.Get("/v1/admin/events").Status, "a readwrite key is not enough")

	path := func(id string) string { return "/v1/admin/events/" + id + "/redeliver" }
	for _, id := range []string{"not-a-uuid", "evt_zz", event.PublicID(uuid.New()), uuid.NewString()} {
		r := e.AdminPost(path(id), nil)
		require.Equal(t, http.StatusNotFound, r.Status, id)
		require.Equal(t, "event not found", r.Map(t)["detail"])
	}
	r := e.AdminPost(path(evs[1].ID.String()), nil)
	require.Equal(t, http.StatusConflict, r.Status, "a pending event is already queued")
	require.Contains(t, r.Map(t)["detail"], "is pending")
	r = e.Do(apptest.Req{Method: "POST", Path: path(oldest.ID.String()), Key: e.Admin, Idem: "-"})
	require.Equal(t, http.StatusBadRequest, r.Status, "Idempotency-Key is required")
	r = e.Do(apptest.Req{Method: "POST", Path: path(oldest.ID.String()), Key: e.RW})
	require.Equal(t, http.StatusForbidden, r.Status)

	jobsBefore := len(deliveryJobs(t, e.App.DB.Bun, oldest.ID))
	first := e.Do(apptest.Req{Method: "POST", Path: path(oldest.ID.String()), Key: e.Admin, Idem: "redeliver-1"})
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))
	require.JSONEq(t, `{"id":"`+oldest.PublicID()+`","status":"pending"}`, string(first.Body))
	again := e.Do(apptest.Req{Method: "POST", Path: path(oldest.ID.String()), Key: e.Admin, Idem: "redeliver-1"})
	require.Equal(t, http.StatusOK, again.Status)
	require.Equal(t, string(first.Body), string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))

	got, err := e.App.Events.Get(ctx, oldest.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Redeliveries, "the replay did not redeliver twice")
	require.Equal(t, event.StatusPending, got.Status)
	require.Zero(t, got.Attempts)
	require.Len(t, deliveryJobs(t, e.App.DB.Bun, oldest.ID), jobsBefore+1, "one fresh job")

	r = e.AdminPost(path(oldest.PublicID()), nil)
	require.Equal(t, http.StatusConflict, r.Status, "no longer dead: found by the evt_ id the list shows too")
	require.Len(t, listEvents(t, e, ""), 3, "events are never deleted")
}

func TestBacklogDrainsOnceAURLIsSet(t *testing.T) {
	t.Parallel()
	e := apptest.New(t, apptest.WithWorker()) // no PLATFORM_WEBHOOK_URL
	ctx := context.Background()
	var evs []event.Event
	for _, d := range samples()[:5] {
		evs = append(evs, emitWith(t, e.App.DB.Bun, e.App.Events, d.Type(), d))
	}
	apptest.Eventually(t, 20*time.Second, func() bool {
		return countRows(t, e.App.DB.Bun, `SELECT count(DISTINCT o.id) FROM outbound_events o JOIN river_job j ON j.state = 'completed'
   AND (j.args->>'event_id' = o.id::text OR j.args->'event_ids' @> jsonb_build_array(o.id::text))`) == len(evs)
	}, "the delivery jobs ran")
	for _, rec := range listEvents(t, e, "") {
		require.Equal(t, event.StatusPending, rec.Status)
		require.Zero(t, rec.Attempts, "no attempt spent without a URL")
		require.Nil(t, rec.LastError)
	}
	e.StopWorker()

	// The operator sets the URL; the next worker start drains the backlog.
	rcv := newReceiver(t, secret, time.Now)
	cfg := e.App.Cfg
	cfg.Webhooks.URL, cfg.Webhooks.Secret = rcv.URL(), secret
	a2, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler), app.Options{})
	require.NoError(t, err)
	t.Cleanup(a2.Close)
	w, err := a2.Worker(queue.WorkerParams{FetchPollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	queuetest.Start(t, w, 10*time.Second)

	apptest.Eventually(t, 20*time.Second, func() bool {
		return len(listEvents(t, e, "?status=delivered")) == len(evs)
	}, "the backlog delivered")
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, reqs, len(evs), "each event once")
	for _, rec := range listEvents(t, e, "") {
		require.Equal(t, 1, rec.Attempts)
	}
}

func TestACommittedEventSurvivesAWorkerCrash(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, secret, time.Now)
	e := apptest.New(t, withWebhook(rcv.URL(), 2*time.Second), apptest.WithWorker())
	ctx := context.Background()
	e.StopWorker() // the worker is gone between the commit and the delivery

	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositSettled, samples()[1])
	apptest.Eventually(t, 10*time.Second, func() bool {
		return countRows(t, e.App.DB.Bun, `SELECT count(*) FROM river_job WHERE kind = 'event_deliver_batch' AND state = 'available'
   AND args->'event_ids' @> jsonb_build_array(?::text)`, ev.ID.String()) == 1
	}, "the wake job waits in the database")
	require.Zero(t, rcv.count())

	e.StartWorker() // a restarted worker picks it up
	apptest.Eventually(t, 20*time.Second, func() bool {
		got, err := e.App.Events.Get(ctx, ev.ID)
		require.NoError(t, err)
		return got.Status == event.StatusDelivered
	}, "the event delivered after the restart")
	require.Equal(t, 1, rcv.count())
	_, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
}

func TestARolledBackChangeSendsNothing(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, secret, time.Now)
	e := apptest.New(t, withWebhook(rcv.URL(), 2*time.Second), apptest.WithWorker())
	boom := errors.New("ledger refused")
	err := db.RunInTx(context.Background(), e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		if _, err := e.App.Events.Emit(ctx, tx, event.DepositSettled, samples()[1]); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, listEvents(t, e, ""))
	time.Sleep(3 * queue.DefaultWakeDelay) // a wake would be in by now
	require.Equal(t, 0, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM river_job WHERE kind IN ('event_deliver', 'event_deliver_batch')"))

	// A committed one, emitted after, is the only one the platform sees.
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositExpired, samples()[4])
	apptest.Eventually(t, 20*time.Second, func() bool { return rcv.count() == 1 }, "the committed event delivered")
	reqs, _, _ := rcv.snapshot()
	require.Equal(t, string(ev.Payload), string(reqs[0].Body))
}
