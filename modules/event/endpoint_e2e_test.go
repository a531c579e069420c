package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/alert"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/event/eventtest"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/webhooksig"
)

// endpointWithSecret is the answer of a creation or a rotation.
type endpointWithSecret struct {
	event.EndpointRecord
	Secret *string `json:"secret"`
}

// addEndpoint adds an endpoint through the API and points rcv's signature
// check at its secret.
func addEndpoint(t *testing.T, e *apptest.Env, rcv *receiver, events ...string) endpointWithSecret {
	t.Helper()
	r := e.AdminPost("/v1/admin/webhook-endpoints", map[string]any{"url": rcv.URL(), "events": events, "description": "test"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var ep endpointWithSecret
	r.JSON(t, &ep)
	require.NotNil(t, ep.Secret)
	require.Regexp(t, `^whsec_[0-9a-f]{64}$`, *ep.Secret)
	rcv.mu.Lock()
	rcv.secret = *ep.Secret
	rcv.mu.Unlock()
	return ep
}

// typesOf returns the types of the deliveries a receiver got, and requires
// that each body is one of the emitted events' bytes.
func typesOf(t *testing.T, rcv *receiver, emitted map[string]event.Event) []string {
	t.Helper()
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad, "every delivery verifies with the endpoint's own secret")
	var out []string
	for _, r := range reqs {
		var body struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &body))
		ev, ok := emitted[body.ID]
		require.True(t, ok, "unknown id %s", body.ID)
		require.Equal(t, string(ev.Payload), string(r.Body))
		out = append(out, body.Type)
	}
	return out
}

// TestWebhookEndpointsReceiveTheirEvents: two endpoints with different
// filters, beside the platform URL, through the worker: each gets exactly
// the events its filter takes, once, signed with its own secret; the
// platform URL gets every event as before; the admin view shows each
// event's deliveries.
func TestWebhookEndpointsReceiveTheirEvents(t *testing.T) {
	t.Parallel()
	platform := newReceiver(t, secret, time.Now)
	e := apptest.New(t, withWebhook(platform.URL(), 2*time.Second), apptest.WithWorker())
	deposits, others := newReceiver(t, "", time.Now), newReceiver(t, "", time.Now)
	epA := addEndpoint(t, e, deposits, "deposit.*")
	epB := addEndpoint(t, e, others, "withdrawal.completed", "hold.*")

	emitted := map[string]event.Event{}
	wantA, wantB := 0, 0
	for _, d := range samples() {
		ev := emitWith(t, e.App.DB.Bun, e.App.Events, d.Type(), d)
		emitted[ev.PublicID()] = ev
		if strings.HasPrefix(string(d.Type()), "deposit.") {
			wantA++
		}
		if d.Type() == event.WithdrawalCompleted || strings.HasPrefix(string(d.Type()), "hold.") {
			wantB++
		}
	}
	apptest.Eventually(t, 20*time.Second, func() bool {
		return platform.count() == len(emitted) && deposits.count() == wantA && others.count() == wantB
	}, "every delivery made")
	time.Sleep(200 * time.Millisecond) // nothing more arrives
	require.Len(t, typesOf(t, platform, emitted), len(emitted))
	for _, typ := range typesOf(t, deposits, emitted) {
		require.True(t, strings.HasPrefix(typ, "deposit."), typ)
	}
	for _, typ := range typesOf(t, others, emitted) {
		require.True(t, typ == "withdrawal.completed" || strings.HasPrefix(typ, "hold."), typ)
	}
	require.Len(t, typesOf(t, deposits, emitted), wantA)
	require.Len(t, typesOf(t, others, emitted), wantB)

	apptest.Eventually(t, 10*time.Second, func() bool {
		return len(listDeliveries(t, e, "?status=delivered&limit=200")) == wantA+wantB
	}, "every endpoint delivery recorded")
	for _, rec := range listEvents(t, e, "?limit=200") {
		ev := emitted[rec.ID]
		var want []string
		if strings.HasPrefix(string(ev.Type), "deposit.") {
			want = append(want, epA.ID)
		}
		if ev.Type == event.WithdrawalCompleted || strings.HasPrefix(string(ev.Type), "hold.") {
			want = append(want, epB.ID)
		}
		var got []string
		for _, x := range rec.Deliveries {
			got = append(got, x.EndpointID)
			require.Equal(t, event.StatusDelivered, x.Status)
			require.Equal(t, 1, x.Attempts)
			require.Nil(t, x.LastError)
			require.NotNil(t, x.DeliveredAt)
		}
		require.ElementsMatch(t, want, got, rec.Type)
		require.Equal(t, event.StatusDelivered, rec.Status, "the platform URL's delivery is the event's own")
	}
	require.Equal(t, len(emitted), eventtest.RequireAllValid(t, e.App.DB.Bun))
}

func listDeliveries(t *testing.T, e *apptest.Env, query string) []event.DeliveryListItem {
	t.Helper()
	l := okBody[struct {
		Deliveries []event.DeliveryListItem `json:"deliveries"`
	}](t, e.AdminGet("/v1/admin/webhook-deliveries"+query))
	require.NotNil(t, l.Deliveries)
	return l.Deliveries
}

// TestWebhookEndpointsAdmin: the admin routes' answers and refusals, the
// secret shown once (a replay says null), and the audit trail.
func TestWebhookEndpointsAdmin(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	body := map[string]any{"url": "https://platform.example/hooks", "events": []string{"deposit.*", "withdrawal.completed"}, "description": "sync"}
	first := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/webhook-endpoints", Body: body, Key: e.Admin, Idem: "ep-1"})
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	var ep endpointWithSecret
	first.JSON(t, &ep)
	require.NotNil(t, ep.Secret)
	require.Equal(t, []string{"deposit.*", "withdrawal.completed"}, ep.Events)
	require.False(t, ep.Disabled)
	require.Nil(t, ep.PreviousSecretExpiresAt)

	again := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/webhook-endpoints", Body: body, Key: e.Admin, Idem: "ep-1"})
	require.Equal(t, http.StatusCreated, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	var replay endpointWithSecret
	again.JSON(t, &replay)
	require.Equal(t, ep.ID, replay.ID, "one endpoint")
	require.Nil(t, replay.Secret, "the secret is shown once")
	require.NotContains(t, string(again.Body), *ep.Secret)

	// Nowhere readable: not in the row, not in the idempotency record, not
	// in the audit trail.
	for _, q := range []string{"SELECT count(*) FROM webhook_endpoints WHERE position(?::bytea in secret_sealed) > 0",
		"SELECT count(*) FROM idempotency_keys WHERE position(?::bytea in response_body) > 0",
		"SELECT count(*) FROM audit_log WHERE position(? in detail::text) > 0"} {
		require.Zero(t, countRows(t, e.App.DB.Bun, q, *ep.Secret), q)
	}
	var sealed []byte
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT secret_sealed FROM webhook_endpoints WHERE id = ?", ep.ID).Scan(ctx, &sealed))
	require.NotContains(t, string(sealed), strings.TrimPrefix(*ep.Secret, "whsec_"))

	got := okBody[event.EndpointRecord](t, e.AdminGet("/v1/admin/webhook-endpoints/"+ep.ID))
	require.Equal(t, ep.EndpointRecord, got)
	require.NotContains(t, string(e.AdminGet("/v1/admin/webhook-endpoints/"+ep.ID).Body), `"secret"`)
	list := okBody[struct {
		Endpoints []event.EndpointRecord `json:"endpoints"`
	}](t, e.AdminGet("/v1/admin/webhook-endpoints"))
	require.Equal(t, []event.EndpointRecord{ep.EndpointRecord}, list.Endpoints)

	// Refusals: unknown types, bad URLs, missing fields, all at once.
	r := e.AdminPost("/v1/admin/webhook-endpoints", map[string]any{"url": "ftp://x", "events": []string{"deposit.*", "deposit.settle", "depos*", "nope.*", "ping"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	var locs []string
	for _, f := range r.FieldErrors(t) {
		b, _ := json.Marshal(f["loc"])
		locs = append(locs, string(b))
	}
	require.ElementsMatch(t, []string{`["body","url"]`, `["body","events",1]`, `["body","events",2]`, `["body","events",3]`, `["body","events",4]`}, locs)
	r = e.AdminPost("/v1/admin/webhook-endpoints", map[string]any{"events": []string{}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Len(t, r.FieldErrors(t), 2, "url missing, events empty")
	r = e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/webhook-endpoints", Body: body, Key: e.RW})
	require.Equal(t, http.StatusForbidden, r.Status, "a readwrite key is not enough")
	for _, id := range []string{uuid.NewString(), "not-a-uuid"} {
		require.Equal(t, http.StatusNotFound, e.AdminGet("/v1/admin/webhook-endpoints/"+id).Status, id)
		require.Equal(t, http.StatusNotFound, e.AdminPost("/v1/admin/webhook-endpoints/"+id, map[string]any{"disabled": true}).Status, id)
		require.Equal(t, http.StatusNotFound, e.AdminPost("/v1/admin/webhook-endpoints/"+id+"/rotate-secret", nil).Status, id)
		require.Equal(t, http.StatusNotFound, e.AdminPost("/v1/admin/webhook-endpoints/"+id+"/test", nil).Status, id)
	}

	// A partial update.
	r = e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID, map[string]any{"events": []string{"*"}, "disabled": true})
	up := okBody[event.EndpointRecord](t, r)
	require.Equal(t, []string{"*"}, up.Events)
	require.True(t, up.Disabled)
	require.Equal(t, ep.URL, up.URL)
	require.Equal(t, ep.Description, up.Description)
	r = e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID, map[string]any{"events": []string{"withdrawal.done"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	r = e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/rotate-secret", map[string]any{"overlap_seconds": 8 * 24 * 3600})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)

	var actions []string
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT action FROM audit_log WHERE target = ? ORDER BY seq", ep.ID).Scan(ctx, &actions))
	require.Equal(t, []string{event.AuditEndpointCreate, event.AuditEndpointUpdate}, actions)
	rot := e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/rotate-secret", nil)
	require.Equal(t, http.StatusOK, rot.Status, string(rot.Body))
	var rotated endpointWithSecret
	rot.JSON(t, &rotated)
	require.NotNil(t, rotated.Secret)
	require.NotEqual(t, *ep.Secret, *rotated.Secret)
	require.NotNil(t, rotated.PreviousSecretExpiresAt, "a day of overlap by default")
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT action FROM audit_log WHERE target = ? ORDER BY seq", ep.ID).Scan(ctx, &actions))
	require.Equal(t, []string{event.AuditEndpointCreate, event.AuditEndpointUpdate, event.AuditEndpointRotate}, actions)
}

// failingEndpointEnv is an app with a fake clock and no worker: the test
// makes each attempt itself, as a job would, and moves the clock.
func failingEndpointEnv(t *testing.T, opts ...apptest.Option) (*apptest.Env, *clock.Fake, *receiver) {
	fake := clock.NewFake(time.Now())
	platform := newReceiver(t, secret, fake.Now)
	return apptest.New(t, append([]apptest.Option{apptest.WithClock(fake), withWebhook(platform.URL(), 2*time.Second)}, opts...)...), fake, platform
}

// gauge scrapes a gauge without labels from the metrics listener.
func gauge(t *testing.T, e *apptest.Env, name string) string {
	t.Helper()
	resp, err := http.Get(e.MetricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no %s in the metrics", name)
	return ""
}

// TestAFailingEndpointGoesDeadOnItsOwn: one endpoint answers 500: its
// delivery is retried on the SPEC's schedule with jobs of its own and goes
// dead after ten attempts, with an alert, while the other endpoint and the
// platform URL got the event once; its dead delivery is listed, and
// redelivered alone.
func TestAFailingEndpointGoesDeadOnItsOwn(t *testing.T) {
	t.Parallel()
	e, fake, platform := failingEndpointEnv(t, apptest.WithMetrics())
	ctx := context.Background()
	bad, good := newReceiver(t, "", fake.Now), newReceiver(t, "", fake.Now)
	bad.setMode("500")
	epBad := addEndpoint(t, e, bad, "*")
	epGood := addEndpoint(t, e, good, "deposit.settled")
	badID := uuid.MustParse(epBad.ID)
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositSettled, samples()[1])
	d := e.App.Deliverer

	for n := 1; n <= event.MaxAttempts; n++ {
		got, err := d.AttemptEndpoints(ctx, []uuid.UUID{ev.ID}, uuid.Nil, "")
		require.NoError(t, err)
		if n == 1 {
			require.Equal(t, map[event.Outcome]int{event.OutcomeDelivered: 1, event.OutcomeRetry: 1}, got)
			_, err := d.AttemptBatch(ctx, []uuid.UUID{ev.ID}, "")
			require.NoError(t, err)
		} else if n < event.MaxAttempts {
			require.Equal(t, map[event.Outcome]int{event.OutcomeRetry: 1}, got, "attempt %d", n)
		} else {
			require.Equal(t, map[event.Outcome]int{event.OutcomeDead: 1}, got)
			break
		}
		// Not before its time.
		got, err = d.AttemptEndpoints(ctx, []uuid.UUID{ev.ID}, uuid.Nil, "")
		require.NoError(t, err)
		require.Empty(t, got)
		var job struct {
			ScheduledAt time.Time `bun:"scheduled_at"`
		}
		require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT scheduled_at FROM river_job WHERE kind = 'webhook_delivery'
   AND args->>'event_id' = ? AND args->>'endpoint_id' = ? AND (args->>'attempt')::int = ?`, ev.ID.String(), epBad.ID, n+1).Scan(ctx, &job))
		next := fake.Now().Truncate(time.Microsecond).Add(event.RetryDelay(n))
		require.True(t, job.ScheduledAt.Equal(next), "attempt %d: the next job at %s, want %s", n+1, job.ScheduledAt, next)
		fake.Set(next)
	}
	require.Equal(t, event.MaxAttempts, bad.count())
	require.Equal(t, 1, good.count(), "the other endpoint got it once")
	require.Equal(t, 1, platform.count(), "the platform URL got it once")
	own, err := e.App.Events.Get(ctx, ev.ID)
	require.NoError(t, err)
	require.Equal(t, event.StatusDelivered, own.Status, "the event's own delivery is untouched")

	alerts, err := e.App.Alerts.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	require.Len(t, alerts, 1)
	require.Equal(t, event.AlertDead, alerts[0].Type)
	require.Contains(t, alerts[0].Detail, epBad.ID)

	require.Equal(t, "1", gauge(t, e, "svc_webhook_deliveries_dead"))
	require.Equal(t, "0", gauge(t, e, "svc_webhook_deliveries_pending"))
	require.Equal(t, "0", gauge(t, e, "svc_events_dead"), "the event's own delivery is not dead")
	dead := listDeliveries(t, e, "?status=dead")
	require.Len(t, dead, 1)
	require.Equal(t, epBad.ID, dead[0].EndpointID)
	require.Equal(t, ev.PublicID(), dead[0].EventID)
	require.Equal(t, event.MaxAttempts, dead[0].Attempts)
	require.Contains(t, *dead[0].LastError, "HTTP 500")
	require.Empty(t, listDeliveries(t, e, "?status=dead&endpoint_id="+epGood.ID))
	require.Len(t, listDeliveries(t, e, "?endpoint_id="+epGood.ID), 1)
	require.Equal(t, http.StatusUnprocessableEntity, e.AdminGet("/v1/admin/webhook-deliveries?status=gone").Status)
	recs := listEvents(t, e, "")
	require.Len(t, recs, 1)
	byEndpoint := map[string]event.DeliveryRecord{}
	for _, x := range recs[0].Deliveries {
		byEndpoint[x.EndpointID] = x
	}
	require.Equal(t, event.StatusDead, byEndpoint[epBad.ID].Status)
	require.Equal(t, event.StatusDelivered, byEndpoint[epGood.ID].Status)

	// Redeliver the dead one only.
	path := "/v1/admin/events/" + ev.ID.String() + "/redeliver"
	require.Equal(t, http.StatusConflict, e.AdminPost(path, nil).Status, "the event's own delivery is not dead")
	require.Equal(t, http.StatusConflict, e.AdminPost(path, map[string]any{"endpoint_id": epGood.ID}).Status, "delivered")
	require.Equal(t, http.StatusNotFound, e.AdminPost(path, map[string]any{"endpoint_id": uuid.NewString()}).Status)
	require.Equal(t, http.StatusNotFound, e.AdminPost("/v1/admin/events/"+uuid.NewString()+"/redeliver", map[string]any{"endpoint_id": epBad.ID}).Status)
	require.Equal(t, http.StatusUnprocessableEntity, e.AdminPost(path, map[string]any{"endpoint_id": "x"}).Status)
	r := e.AdminPost(path, map[string]any{"endpoint_id": epBad.ID})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.JSONEq(t, `{"id":"`+ev.PublicID()+`","status":"pending"}`, string(r.Body))
	require.Equal(t, http.StatusConflict, e.AdminPost(path, map[string]any{"endpoint_id": epBad.ID}).Status, "pending now")
	require.Equal(t, "0", gauge(t, e, "svc_webhook_deliveries_dead"))
	require.Equal(t, "1", gauge(t, e, "svc_webhook_deliveries_pending"))
	require.Equal(t, 1, countRows(t, e.App.DB.Bun, `SELECT count(*) FROM river_job WHERE kind = 'webhook_delivery'
   AND args->>'endpoint_id' = ? AND (args->>'attempt')::int = 1 AND (args->>'cycle')::int = 1`, epBad.ID), "a fresh job")
	require.Equal(t, 1, countRows(t, e.App.DB.Bun, `SELECT count(*) FROM audit_log WHERE action = 'event.redeliver'
   AND detail->>'endpoint_id' = ?`, epBad.ID))

	bad.setMode("ok")
	got, err := d.AttemptEndpoints(ctx, []uuid.UUID{ev.ID}, badID, "")
	require.NoError(t, err)
	require.Equal(t, map[event.Outcome]int{event.OutcomeDelivered: 1}, got)
	require.Equal(t, event.MaxAttempts+1, bad.count())
	require.Equal(t, 1, good.count())
	require.Equal(t, 1, platform.count())
	_, badSigs, _ := bad.snapshot()
	require.Empty(t, badSigs)
	require.Empty(t, listDeliveries(t, e, "?status=dead"))
}

// TestRotationSignsWithBothSecretsDuringTheOverlap: after a rotation with
// an overlap, a delivery carries a v1 by each secret, so a receiver holding
// either verifies it; after the overlap only the new one signs.
func TestRotationSignsWithBothSecretsDuringTheOverlap(t *testing.T) {
	t.Parallel()
	e, fake, _ := failingEndpointEnv(t)
	ctx := context.Background()
	rcv := newReceiver(t, "", fake.Now)
	ep := addEndpoint(t, e, rcv, "deposit.*")
	old := *ep.Secret
	r := e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/rotate-secret", map[string]any{"overlap_seconds": 3600})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rotated endpointWithSecret
	r.JSON(t, &rotated)
	fresh := *rotated.Secret
	require.NotNil(t, rotated.PreviousSecretExpiresAt)

	verify := func(i int, s string) error {
		reqs, _, _ := rcv.snapshot()
		return webhooksig.Verify([]byte(s), reqs[i].Signature, reqs[i].Body, fake.Now())
	}
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositExpired, samples()[4])
	_, err := e.App.Deliverer.AttemptEndpoints(ctx, []uuid.UUID{ev.ID}, uuid.Nil, "")
	require.NoError(t, err)
	require.Equal(t, 1, rcv.count())
	require.NoError(t, verify(0, old), "the old secret verifies during the overlap")
	require.NoError(t, verify(0, fresh), "so does the new one")
	reqs, _, _ := rcv.snapshot()
	require.Equal(t, 2, strings.Count(reqs[0].Signature, "v1="))

	// The ping is signed the same way.
	ping := okBody[event.PingResult](t, e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/test", nil))
	require.True(t, ping.Delivered)
	require.NoError(t, verify(1, old))
	require.NoError(t, verify(1, fresh))

	fake.Advance(time.Hour + time.Second)
	require.Nil(t, okBody[event.EndpointRecord](t, e.AdminGet("/v1/admin/webhook-endpoints/"+ep.ID)).PreviousSecretExpiresAt)
	ev2 := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositExpired, samples()[4])
	_, err = e.App.Deliverer.AttemptEndpoints(ctx, []uuid.UUID{ev2.ID}, uuid.Nil, "")
	require.NoError(t, err)
	require.Equal(t, 3, rcv.count())
	require.NoError(t, verify(2, fresh), "the new secret verifies after the overlap")
	require.ErrorIs(t, verify(2, old), webhooksig.ErrMismatch, "the old one no longer does")
	reqs, _, _ = rcv.snapshot()
	require.Equal(t, 1, strings.Count(reqs[2].Signature, "v1="))

	// overlap 0 retires the old secret at once.
	r = e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/rotate-secret", map[string]any{"overlap_seconds": 0})
	require.Equal(t, http.StatusOK, r.Status)
	var third endpointWithSecret
	r.JSON(t, &third)
	require.Nil(t, third.PreviousSecretExpiresAt)
	okBody[event.PingResult](t, e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/test", nil))
	require.NoError(t, verify(3, *third.Secret))
	require.ErrorIs(t, verify(3, fresh), webhooksig.ErrMismatch)
}

// TestADisabledEndpointGetsNothingNew: an event written while an endpoint
// is disabled has no delivery to it; its deliveries still pending wait
// without spending attempts, and resume once it is enabled.
func TestADisabledEndpointGetsNothingNew(t *testing.T) {
	t.Parallel()
	e, fake, _ := failingEndpointEnv(t)
	ctx := context.Background()
	rcv := newReceiver(t, "", fake.Now)
	ep := addEndpoint(t, e, rcv, "*")
	before := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositExpired, samples()[4])
	okBody[event.EndpointRecord](t, e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID, map[string]any{"disabled": true}))
	during := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositSettled, samples()[1])
	require.Zero(t, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM webhook_deliveries WHERE event_id = ?", during.ID))

	got, err := e.App.Deliverer.AttemptEndpoints(ctx, []uuid.UUID{before.ID, during.ID}, uuid.Nil, "")
	require.NoError(t, err)
	require.Empty(t, got, "nothing sent to a disabled endpoint")
	// The wakes are lost: the sweep queues what is due, except the
	// disabled endpoint's delivery.
	for _, id := range []uuid.UUID{before.ID, during.ID} {
		apptest.Eventually(t, 5*time.Second, func() bool {
			return countRows(t, e.App.DB.Bun, `SELECT count(*) FROM river_job WHERE kind = 'event_deliver_batch'
   AND args->'event_ids' @> jsonb_build_array(?::text)`, id.String()) == 1
		}, "the wake inserted")
	}
	_, err = e.App.DB.Bun.ExecContext(ctx, "DELETE FROM river_job WHERE kind = 'event_deliver_batch'")
	require.NoError(t, err)
	n, err := e.App.Deliverer.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the platform URL's two events only")
	require.Zero(t, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM river_job WHERE kind = 'webhook_delivery'"))
	require.Zero(t, rcv.count())

	okBody[event.EndpointRecord](t, e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID, map[string]any{"disabled": false}))
	n, err = e.App.Deliverer.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the held delivery, once the endpoint is enabled")
	require.Equal(t, 1, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM river_job WHERE kind = 'webhook_delivery' AND args->>'event_id' = ?", before.ID))
	got, err = e.App.Deliverer.AttemptEndpoints(ctx, []uuid.UUID{before.ID, during.ID}, uuid.Nil, "")
	require.NoError(t, err)
	require.Equal(t, map[event.Outcome]int{event.OutcomeDelivered: 1}, got)
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	require.Len(t, reqs, 1)
	require.Equal(t, string(before.Payload), string(reqs[0].Body))
}

// TestPingAnEndpoint: the test route sends that endpoint, and it only, a
// signed ping that fits the published schema, and says what came of it.
func TestPingAnEndpoint(t *testing.T) {
	t.Parallel()
	platform := newReceiver(t, secret, time.Now)
	e := apptest.New(t, withWebhook(platform.URL(), 2*time.Second))
	rcv, other := newReceiver(t, "", time.Now), newReceiver(t, "", time.Now)
	ep := addEndpoint(t, e, rcv, "deposit.settled")
	addEndpoint(t, e, other, "*")

	res := okBody[event.PingResult](t, e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/test", nil))
	require.True(t, res.Delivered)
	require.Nil(t, res.Error)
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad, "signed with the endpoint's secret")
	require.Len(t, reqs, 1)
	eventtest.RequireValid(t, reqs[0].Body)
	var body map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &body))
	require.Equal(t, "ping", body["type"])
	require.Equal(t, res.ID, body["id"])
	require.Equal(t, map[string]any{"endpoint_id": ep.ID}, body["data"])
	require.Zero(t, other.count())
	require.Zero(t, platform.count())
	require.Empty(t, listEvents(t, e, ""), "a ping is not an event of the outbox")

	rcv.setMode("500")
	res = okBody[event.PingResult](t, e.AdminPost("/v1/admin/webhook-endpoints/"+ep.ID+"/test", nil))
	require.False(t, res.Delivered)
	require.Contains(t, *res.Error, "HTTP 500")
}

// TestEndpointDeliveriesAreWrittenWithTheEvent: the deliveries exist in
// the transaction that writes the event, for the endpoints enabled and
// matching then, and a rolled-back event leaves none.
func TestEndpointDeliveriesAreWrittenWithTheEvent(t *testing.T) {
	t.Parallel()
	e, fake, _ := failingEndpointEnv(t)
	ctx := context.Background()
	rcv := newReceiver(t, "", fake.Now)
	ep := addEndpoint(t, e, rcv, "deposit.*")
	boom := errors.New("ledger refused")
	var inTx int
	err := db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		ev, err := e.App.Events.Emit(ctx, tx, event.DepositSettled, samples()[1])
		if err != nil {
			return err
		}
		if err := tx.NewRaw("SELECT count(*) FROM webhook_deliveries WHERE event_id = ? AND endpoint_id = ? AND status = 'pending'",
			ev.ID, ep.ID).Scan(ctx, &inTx); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, inTx, "the delivery is written with the event")
	require.Zero(t, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM webhook_deliveries"), "rolled back with it")
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.WithdrawalFailed, samples()[9])
	require.Zero(t, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM webhook_deliveries WHERE event_id = ?", ev.ID), "the filter does not take it")
}

// TestConcurrentEndpointAttemptsSendOnce: attempts racing for the same
// deliveries (wakes, retries, sweeps) send each once.
func TestConcurrentEndpointAttemptsSendOnce(t *testing.T) {
	t.Parallel()
	e, fake, _ := failingEndpointEnv(t)
	ctx := context.Background()
	a, b := newReceiver(t, "", fake.Now), newReceiver(t, "", fake.Now)
	addEndpoint(t, e, a, "*")
	addEndpoint(t, e, b, "deposit.*", "withdrawal.*")
	var ids []uuid.UUID
	want := 0
	for _, d := range samples() {
		ids = append(ids, emitWith(t, e.App.DB.Bun, e.App.Events, d.Type(), d).ID)
		want++
		if strings.HasPrefix(string(d.Type()), "deposit.") || strings.HasPrefix(string(d.Type()), "withdrawal.") {
			want++
		}
	}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sum int
	)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := append([]uuid.UUID(nil), ids...)
			if i%2 == 1 {
				for l, r := 0, len(mine)-1; l < r; l, r = l+1, r-1 {
					mine[l], mine[r] = mine[r], mine[l]
				}
			}
			got, err := e.App.Deliverer.AttemptEndpoints(ctx, mine, uuid.Nil, "")
			assert.NoError(t, err)
			mu.Lock()
			sum += got[event.OutcomeDelivered]
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, want, sum, "each delivery recorded once")
	require.Equal(t, want, a.count()+b.count(), "and sent once")
	require.Zero(t, countRows(t, e.App.DB.Bun, "SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered' OR claim_token IS NOT NULL"))
}

// TestEndpointSecretsNeedTheirKey: without a key no secret is made (503);
// in production a URL must be https (http only to a loopback address); a
// secret sealed under another key does not open, and the delivery fails
// saying so, without the secret in last_error.
func TestEndpointSecretsNeedTheirKey(t *testing.T) {
	t.Parallel()
	e, fake, _ := failingEndpointEnv(t)
	ctx := context.Background()
	actor := audit.CLI("ops")
	create := func(s *event.EndpointService, url string) error {
		return db.RunInTx(ctx, e.App.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
			_, _, err := s.Create(ctx, tx, event.EndpointParams{URL: &url, Events: &[]string{"*"}}, actor)
			return err
		})
	}
	noKey := &event.EndpointService{DB: e.App.DB.Bun, Now: fake.Now, Production: true, URLProblem: config.WebhookURLProblem}
	err := create(noKey, "https://platform.example/hooks")
	require.ErrorIs(t, err, event.ErrNoEndpointKey)
	require.Equal(t, fault.Unavailable, fault.KindOf(err))

	key := make([]byte, 32)
	key[0] = 1
	sealer, err := event.NewSealer(key)
	require.NoError(t, err)
	prod := &event.EndpointService{DB: e.App.DB.Bun, Now: fake.Now, Production: true, URLProblem: config.WebhookURLProblem, Sealer: sealer}
	err = create(prod, "http://platform.example/hooks")
	require.Equal(t, fault.Invalid, fault.KindOf(err), "plain http in production")
	rcv := newReceiver(t, "", fake.Now)
	require.NoError(t, create(prod, rcv.URL()), "http to a loopback address")

	// The app's Deliverer has the development key, not this one.
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.DepositExpired, samples()[4])
	got, err := e.App.Deliverer.AttemptEndpoints(ctx, []uuid.UUID{ev.ID}, uuid.Nil, "")
	require.NoError(t, err)
	require.Equal(t, map[event.Outcome]int{event.OutcomeRetry: 1}, got)
	require.Zero(t, rcv.count())
	var lastError string
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT last_error FROM webhook_deliveries WHERE event_id = ?", ev.ID).Scan(ctx, &lastError))
	require.Contains(t, lastError, "cannot be unsealed with WEBHOOK_ENDPOINT_KEY")
}

// TestAnEndpointRetryRunsThroughTheWorker: the first attempt is the
// event's wake job's; the retry is a webhook_delivery job River runs at
// its time.
func TestAnEndpointRetryRunsThroughTheWorker(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	e := apptest.New(t, apptest.WithClock(fake), apptest.WithWorker()) // no PLATFORM_WEBHOOK_URL
	ctx := context.Background()
	rcv := newReceiver(t, "", fake.Now)
	rcv.setMode("500")
	ep := addEndpoint(t, e, rcv, "withdrawal.*")
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, event.WithdrawalFailed, samples()[9])

	var jobID int64
	apptest.Eventually(t, 20*time.Second, func() bool {
		return e.App.DB.Bun.NewRaw(`SELECT id FROM river_job WHERE kind = 'webhook_delivery' AND state = 'scheduled'
   AND args->>'event_id' = ? AND args->>'endpoint_id' = ? AND (args->>'attempt')::int = 2`, ev.ID.String(), ep.ID).Scan(ctx, &jobID) == nil
	}, "the first attempt failed and scheduled the second")
	require.Equal(t, 1, rcv.count())
	rcv.setMode("ok")
	fake.Advance(event.RetryDelay(1))
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE river_job SET state = 'available', scheduled_at = now() WHERE id = ?", jobID)
	require.NoError(t, err)
	apptest.Eventually(t, 20*time.Second, func() bool {
		return countRows(t, e.App.DB.Bun, "SELECT count(*) FROM webhook_deliveries WHERE event_id = ? AND status = 'delivered' AND attempts = 2", ev.ID) == 1
	}, "the retry delivered")
	require.Equal(t, 2, rcv.count())
	_, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	own, err := e.App.Events.Get(ctx, ev.ID)
	require.NoError(t, err)
	require.Equal(t, event.StatusPending, own.Status, "without a URL the event's own delivery waits, as before")
	require.Zero(t, own.Attempts)
}
