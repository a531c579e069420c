package event_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/config"
)

// deadEvent emits an event and marks it dead, as ten failed attempts
// would.
func deadEvent(t *testing.T, e *apptest.Env) event.Event {
	t.Helper()
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, samples()[0].Type(), samples()[0])
	_, err := e.App.DB.Bun.ExecContext(context.Background(),
		"UPDATE outbound_events SET status = 'dead', attempts = 10, dead_at = now() WHERE id = ?", ev.ID)
	require.NoError(t, err)
	got, err := e.App.Events.Get(context.Background(), ev.ID)
	require.NoError(t, err)
	return got
}

// auditActors lists the actors of the audit trail's entries of action,
// newest first, through GET /v1/admin/audit.
func auditActors(t *testing.T, e *apptest.Env, action string) []string {
	t.Helper()
	r := e.AdminGet("/v1/admin/audit?action=" + action)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var l audit.ListView
	r.JSON(t, &l)
	out := []string{}
	for _, x := range l.Entries {
		out = append(out, x.Actor)
	}
	return out
}

// TestRedeliverSigned: POST /v1/admin/events/{event_id}/redeliver with an
// approver's signed statement of the event and its type redelivers it, as
// op:NAME in the audit trail; the same statement again is 401, a
// statement of another type 403, and a viewer's 403, and nothing is
// redelivered; with OPERATOR_SIGNATURES=required an unsigned redelivery is
// 401 and a signed one works.
func TestRedeliverSigned(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	team := operatortest.Team(t, e.App.DB.Bun, time.Now, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver}, operatortest.Member{Name: "val", Role: operator.Viewer})
	redeliver := func(e *apptest.Env, ev event.Event, h map[string]string) *apptest.Response {
		return e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/events/" + ev.PublicID() + "/redeliver", Key: e.Admin, Header: h})
	}
	status := func(ev event.Event) event.Status {
		got, err := e.App.Events.Get(context.Background(), ev.ID)
		require.NoError(t, err)
		return got.Status
	}

	ev := deadEvent(t, e)
	signed := operatortest.Header(t, team["bob"], event.RedeliverExpect(ev), time.Now())
	r := redeliver(e, ev, signed)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, event.StatusPending, status(ev))
	require.Equal(t, []string{"op:bob"}, auditActors(t, e, audit.EventRedeliver))

	// The same statement again, on the event dead again: refused, unchanged.
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "UPDATE outbound_events SET status = 'dead', attempts = 10, dead_at = now() WHERE id = ?", ev.ID)
	require.NoError(t, err)
	r = redeliver(e, ev, signed)
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	require.Equal(t, event.StatusDead, status(ev))

	other := event.RedeliverExpect(ev)
	other.Facts = map[string]string{"type": string(event.DepositSettled)}
	r = redeliver(e, ev, operatortest.Header(t, team["bob"], other, time.Now()))
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], "type")
	r = redeliver(e, ev, operatortest.Header(t, team["val"], event.RedeliverExpect(ev), time.Now()))
	require.Equal(t, http.StatusForbidden, r.Status, "a viewer does not redeliver: %s", r.Body)
	require.Equal(t, event.StatusDead, status(ev))
	require.Len(t, auditActors(t, e, audit.EventRedeliver), 1, "the refused ones are not recorded")

	// Unsigned, the admin key acts while signatures are not required.
	r = redeliver(e, ev, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, []string{e.AdminKeyID, "op:bob"}, auditActors(t, e, audit.EventRedeliver))

	req := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	admins := operatortest.Team(t, req.App.DB.Bun, time.Now, operatortest.Member{Name: "ada", Role: operator.Admin})
	ev = deadEvent(t, req)
	r = redeliver(req, ev, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], operator.Header)
	r = redeliver(req, ev, operatortest.Header(t, admins["ada"], event.RedeliverExpect(ev), time.Now()))
	require.Equal(t, http.StatusOK, r.Status, "an admin may do what an approver may: %s", r.Body)
	require.Equal(t, []string{"op:ada"}, auditActors(t, req, audit.EventRedeliver))
}
