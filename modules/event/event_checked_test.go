package event_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
)

// TestEventRoutesEdges: what the event routes answer at the edges of their
// parameters, as openapi.json describes them: an empty type or status is
// no filter; a raw uuid is a cursor as good as its evt_ id; an event id
// that cannot exist (not text PostgreSQL could store, too long) is 404, not
// 422; an unknown parameter is reported with the other bad ones, and a
// timestamp that names no time zone is refused.
func TestEventRoutesEdges(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	first := emitWith(t, e.App.DB.Bun, e.App.Events, samples()[0].Type(), samples()[0])
	second := emitWith(t, e.App.DB.Bun, e.App.Events, samples()[1].Type(), samples()[1])
	waitListed(t, e, 2)

	require.Len(t, getFeed(t, e, "?type=").Events, 2, "an empty type is no filter")
	p := getFeed(t, e, "?cursor="+first.ID.String())
	require.Len(t, p.Events, 1, "a raw uuid cursor")
	require.Equal(t, second.PublicID(), idOf(t, p.Events[0]))
	require.Len(t, getFeed(t, e, "?cursor="+strings.ToUpper(strings.TrimPrefix(first.PublicID(), "evt_"))).Events, 1,
		"32 hex digits are a uuid too")

	for _, id := range []string{"%FF%FE", "a%00b", strings.Repeat("x", 300)} {
		r := e.Get("/v1/events/" + id)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", id, r.Body)
		r = e.AdminPost("/v1/admin/events/"+id+"/redeliver", nil)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", id, r.Body)
	}

	r := e.Get("/v1/events?created_after=2026-05-04T10:00:00&limit=0&x=1")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	types := map[string]string{}
	for _, f := range r.FieldErrors(t) {
		types[f["loc"].([]any)[1].(string)] = f["type"].(string)
	}
	require.Equal(t, map[string]string{"created_after": "datetime_parsing", "limit": "greater_than_equal", "x": "extra_forbidden"}, types)

	r = e.AdminGet("/v1/admin/events?status=x&limit=0&stauts=dead")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Len(t, r.FieldErrors(t), 3, string(r.Body))
	r = e.AdminGet("/v1/admin/events?stauts=dead")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "extra_forbidden", r.FieldErrors(t)[0]["type"])
	require.Equal(t, "Unknown query parameter; this list takes status, limit", r.FieldErrors(t)[0]["msg"])
}
