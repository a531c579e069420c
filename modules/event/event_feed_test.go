package event_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/event/eventtest"
	"svc/platform/clock"
)

// getFeed reads GET /v1/events as a client does: each event kept as the
// exact bytes of the response (event.FeedPage).
func getFeed(t *testing.T, e *apptest.Env, query string) event.FeedPage {
	t.Helper()
	p := okBody[event.FeedPage](t, e.Get("/v1/events"+query))
	require.NotNil(t, p.Events, "an empty list is [], not null")
	return p
}

func idOf(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(raw, &v))
	return v.ID
}

// readFeed follows next_cursor from cursor ("" for the start) to the last
// page, with query (more parameters, "&..."), and returns every event read
// and the id of the last one ("" when none).
func readFeed(t *testing.T, e *apptest.Env, cursor string, limit int, query string) ([]json.RawMessage, string) {
	t.Helper()
	var out []json.RawMessage
	for {
		q := fmt.Sprintf("?limit=%d%s", limit, query)
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		p := getFeed(t, e, q)
		require.LessOrEqual(t, len(p.Events), limit)
		out = append(out, p.Events...)
		if len(p.Events) > 0 {
			cursor = idOf(t, p.Events[len(p.Events)-1])
		}
		if p.NextCursor == nil {
			return out, cursor
		}
		require.Equal(t, cursor, *p.NextCursor, "next_cursor is the last event of the page")
	}
}

func ids(t *testing.T, events []json.RawMessage) []string {
	t.Helper()
	out := make([]string, 0, len(events))
	for _, ev := range events {
		out = append(out, idOf(t, ev))
	}
	return out
}

// waitListed waits until the feed (from the start) holds n events: an
// event is listed once every transaction that began writing before it has
// ended, and other tests' transactions on the same server can hold that
// back for a moment.
func waitListed(t *testing.T, e *apptest.Env, n int) []json.RawMessage {
	t.Helper()
	var got []json.RawMessage
	apptest.Eventually(t, 30*time.Second, func() bool {
		got, _ = readFeed(t, e, "", event.MaxFeedLimit, "")
		return len(got) >= n
	}, fmt.Sprintf("%d events listed", n))
	require.Len(t, got, n)
	return got
}

// TestFeedListsEveryEventOnceWhateverItsDelivery: delivered, failing,
// dead and never attempted events are each listed exactly once, as the
// very bytes their delivery sends (or would send), and GET
// /v1/events/{id} answers the same bytes.
func TestFeedListsEveryEventOnceWhateverItsDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := clock.NewFake(time.Now())
	rcv := newReceiver(t, secret, fake.Now)
	e := apptest.New(t, apptest.WithClock(fake), withWebhook(rcv.URL(), 2*time.Second))
	d := e.App.Deliverer

	emitted := map[string]event.Event{}
	var order []string
	emit := func(i int) event.Event {
		data := samples()[i%len(samples())]
		ev := emitWith(t, e.App.DB.Bun, e.App.Events, data.Type(), data)
		emitted[ev.PublicID()] = ev
		order = append(order, ev.PublicID())
		fake.Advance(time.Millisecond)
		return ev
	}
	// Delivered.
	for i := 0; i < 4; i++ {
		out, err := d.Attempt(ctx, emit(i).ID)
		require.NoError(t, err)
		require.Equal(t, event.OutcomeDelivered, out)
	}
	// Failing: one failed attempt, pending a retry.
	rcv.setMode("500")
	for i := 4; i < 7; i++ {
		out, err := d.Attempt(ctx, emit(i).ID)
		require.NoError(t, err)
		require.Equal(t, event.OutcomeRetry, out)
	}
	// Dead: ten failed attempts.
	dead := emit(7)
	for n := 1; n <= event.MaxAttempts; n++ {
		out, err := d.Attempt(ctx, dead.ID)
		require.NoError(t, err)
		if n < event.MaxAttempts {
			require.Equal(t, event.OutcomeRetry, out)
			fake.Advance(event.RetryDelay(n))
		} else {
			require.Equal(t, event.OutcomeDead, out)
		}
	}
	// Never attempted.
	for i := 8; i < 11; i++ {
		emit(i)
	}

	statuses := map[event.Status]int{}
	for _, ev := range emitted {
		got, err := e.App.Events.Get(ctx, ev.ID)
		require.NoError(t, err)
		statuses[got.Status]++
	}
	require.Equal(t, map[event.Status]int{event.StatusDelivered: 4, event.StatusPending: 6, event.StatusDead: 1}, statuses)

	waitListed(t, e, len(emitted))
	listed, _ := readFeed(t, e, "", 3, "")
	require.Equal(t, order, ids(t, listed), "every event once, in the order they committed")

	sent := map[string]string{} // id -> the first body the receiver got
	reqs, bad, _ := rcv.snapshot()
	require.Empty(t, bad)
	for _, r := range reqs {
		var b struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &b))
		if _, ok := sent[b.ID]; !ok {
			sent[b.ID] = string(r.Body)
		}
	}
	require.Len(t, sent, 8, "4 delivered, 3 failed once, 1 dead")
	for _, raw := range listed {
		id := idOf(t, raw)
		ev := emitted[id]
		require.Equal(t, string(ev.Payload), string(raw), "%s: the listed event is the stored body", id)
		if body, ok := sent[id]; ok {
			require.Equal(t, body, string(raw), "%s: the listed event is what the platform was sent", id)
		}
		eventtest.RequireValid(t, raw)

		r := e.Get("/v1/events/" + id)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.Equal(t, string(ev.Payload), string(r.Body))
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	}
}

// TestFeedPagesDoNotShiftUnderInserts: events emitted while a reader
// pages through the list never move, repeat or skip an event on a later
// page; they come after everything already there, and a reader that polls
// again from the last id it read gets exactly them.
func TestFeedPagesDoNotShiftUnderInserts(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	e := apptest.New(t, apptest.WithClock(fake))
	var want []string
	emit := func() {
		data := samples()[len(want)%len(samples())]
		want = append(want, emitWith(t, e.App.DB.Bun, e.App.Events, data.Type(), data).PublicID())
		fake.Advance(time.Second)
	}
	for i := 0; i < 7; i++ {
		emit()
	}
	waitListed(t, e, 7)

	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		q := "?limit=3"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		p := getFeed(t, e, q)
		seen = append(seen, ids(t, p.Events)...)
		if page < 3 {
			// Inserted between two reads: at the end, never on a page
			// already read, never twice.
			emit()
			emit()
		}
		if p.NextCursor == nil {
			break
		}
		cursor = *p.NextCursor
		require.Equal(t, seen[len(seen)-1], cursor)
	}
	require.Equal(t, want[:len(seen)], seen, "the stream as it grew: the first events in order, then the inserted ones")
	require.GreaterOrEqual(t, len(seen), 7)

	// Polling again from the last id read gives the rest, and nothing twice.
	all := waitListed(t, e, len(want))
	require.Equal(t, want, ids(t, all))
	rest, last := readFeed(t, e, seen[len(seen)-1], 2, "")
	require.Equal(t, want[len(seen):], ids(t, rest))
	require.Equal(t, want[len(want)-1], last)
	p := getFeed(t, e, "?cursor="+last)
	require.Empty(t, p.Events)
	require.Nil(t, p.NextCursor)
}

// TestFeedNeverSkipsAnEventThatCommitsLate: events commit in another order
// than they were written. A transaction writes event a1 and stays open;
// meanwhile b is written and committed; then the open transaction writes
// a2, created after b, and commits. A reader that read the list while the
// transaction was open, and goes on from the last id it read, still gets
// a1, a2 and b: b was not listed while a transaction that began writing
// before it was open. With (created_at, id) order that reader would have
// seen b, gone on from b, and never seen a1.
func TestFeedNeverSkipsAnEventThatCommitsLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := clock.NewFake(time.Now())
	e := apptest.New(t, apptest.WithClock(fake))
	s := samples()
	first := emitWith(t, e.App.DB.Bun, e.App.Events, s[0].Type(), s[0])
	waitListed(t, e, 1)
	fake.Advance(time.Second)

	tx, err := e.App.DB.Bun.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	a1, err := e.App.Events.Emit(ctx, tx, s[1].Type(), s[1])
	require.NoError(t, err)
	fake.Advance(time.Second)
	b := emitWith(t, e.App.DB.Bun, e.App.Events, s[2].Type(), s[2])
	fake.Advance(time.Second)
	a2, err := e.App.Events.Emit(ctx, tx, s[3].Type(), s[3])
	require.NoError(t, err)
	require.True(t, a2.CreatedAt.After(b.CreatedAt))

	// b is committed, and readable by id (a webhook may carry it already),
	// but not listed: a1's transaction, which began writing first, is open.
	r := e.Get("/v1/events/" + b.PublicID())
	require.Equal(t, http.StatusOK, r.Status)
	p := getFeed(t, e, "")
	require.Equal(t, []string{first.PublicID()}, ids(t, p.Events))
	require.Nil(t, p.NextCursor)
	p = getFeed(t, e, "?cursor="+first.PublicID())
	require.Empty(t, p.Events, "nothing after the last id read yet")
	// Nor is it a cursor: a page after it would skip a1 and a2 for good.
	r = e.Get("/v1/events?cursor=" + b.PublicID())
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, []any{"query", "cursor"}, r.FieldErrors(t)[0]["loc"])

	require.NoError(t, tx.Commit())
	waitListed(t, e, 4)
	rest, _ := readFeed(t, e, first.PublicID(), 1, "")
	require.Equal(t, []string{a1.PublicID(), a2.PublicID(), b.PublicID()}, ids(t, rest),
		"the reader goes on from the last id it read and misses nothing")

	// An event's place in the stream never changes.
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE outbound_events SET xact_id = '1' WHERE id = ?", b.ID)
	require.ErrorContains(t, err, "never change")
}

// TestFeedFilters: type keeps one type; created_after keeps the events
// created strictly after it (a filter, in stream order), with Z, an offset
// or a "+" that form decoding turned into a space.
func TestFeedFilters(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC))
	e := apptest.New(t, apptest.WithClock(fake))
	var all []event.Event
	for _, d := range samples() {
		all = append(all, emitWith(t, e.App.DB.Bun, e.App.Events, d.Type(), d))
		fake.Advance(time.Minute)
	}
	waitListed(t, e, len(all))

	got, _ := readFeed(t, e, "", 1, "&type="+string(event.DepositReviewRequired))
	var want []string
	for _, ev := range all {
		if ev.Type == event.DepositReviewRequired {
			want = append(want, ev.PublicID())
		}
	}
	require.Len(t, want, 2)
	require.Equal(t, want, ids(t, got))

	at := all[5].CreatedAt // events 6 and later were created after it
	var after []string
	for _, ev := range all[6:] {
		after = append(after, ev.PublicID())
	}
	for _, v := range []string{
		url.QueryEscape(at.Format(time.RFC3339Nano)),
		url.QueryEscape(at.Format("2006-01-02T15:04:05.000000-07:00")),
		at.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.999999-07:00"), // "+02:00" unencoded
	} {
		got, _ := readFeed(t, e, "", 2, "&created_after="+v)
		require.Equal(t, after, ids(t, got), "created_after=%s", v)
	}
	got, _ = readFeed(t, e, "", 50, "&type=withdrawal.completed&created_after="+url.QueryEscape(all[7].CreatedAt.Format(time.RFC3339Nano)))
	require.Equal(t, []string{all[8].PublicID()}, ids(t, got))
}

// TestFeedRefusesBadQueries: a bad type, limit, cursor or created_after,
// or a parameter the list does not take, is a 422 field error (all of
// them in one answer); an unknown or malformed event id is 404.
func TestFeedRefusesBadQueries(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, samples()[0].Type(), samples()[0])
	unknown := event.PublicID(uuid.Must(uuid.NewV7()))
	for _, tc := range []struct {
		query string
		locs  [][]any
	}{
		{"?type=deposit.paid", [][]any{{"query", "type"}}},
		{"?type=DEPOSIT.SETTLED", [][]any{{"query", "type"}}},
		{"?limit=0", [][]any{{"query", "limit"}}},
		{"?limit=201", [][]any{{"query", "limit"}}},
		{"?limit=ten", [][]any{{"query", "limit"}}},
		{"?cursor=nope", [][]any{{"query", "cursor"}}},
		{"?cursor=", [][]any{{"query", "cursor"}}},
		{"?cursor=" + unknown, [][]any{{"query", "cursor"}}},
		{"?created_after=yesterday", [][]any{{"query", "created_after"}}},
		{"?created_after=2026-05-04T10:00:00", [][]any{{"query", "created_after"}}}, // no time zone
		{"?created_after=", [][]any{{"query", "created_after"}}},
		{"?typ=deposit.settled", [][]any{{"query", "typ"}}},
		{"?type=x&limit=-1&created_after=x&starting_after=" + ev.PublicID(),
			[][]any{{"query", "type"}, {"query", "created_after"}, {"query", "limit"}, {"query", "starting_after"}}},
	} {
		r := e.Get("/v1/events" + tc.query)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tc.query, r.Body)
		var locs [][]any
		for _, f := range r.FieldErrors(t) {
			locs = append(locs, f["loc"].([]any))
		}
		require.ElementsMatch(t, tc.locs, locs, tc.query)
	}
	for _, id := range []string{unknown, "evt_nope", ev.PublicID() + "0", "nope"} {
		r := e.Get("/v1/events/" + id)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", id, r.Body)
		var b struct {
			Detail string `json:"detail"`
		}
		r.JSON(t, &b)
		require.NotEmpty(t, b.Detail)
	}
}

// TestFeedNeedsAPlatformKey: both endpoints answer as every other platform
// endpoint does: 401 without a key, with a malformed, unknown or revoked
// one; 200 with the readwrite key and with an admin key (which satisfies
// readwrite).
func TestFeedNeedsAPlatformKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := apptest.New(t)
	ev := emitWith(t, e.App.DB.Bun, e.App.Events, samples()[0].Type(), samples()[0])
	revokedKey, revoked, err := e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "old platform",
		Actor: audit.CLI("test")})
	require.NoError(t, err)
	_, err = e.App.Keys.Revoke(ctx, revokedKey.ID, audit.CLI("test"))
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		header map[string]string
		key    string
		want   int
	}{
		{"none", nil, "-", http.StatusUnauthorized},
		{"not bearer", map[string]string{"Authorization": "Basic " + e.RW}, "-", http.StatusUnauthorized},
		{"unknown", nil, e.RW + "x", http.StatusUnauthorized},
		{"revoked", nil, revoked, http.StatusUnauthorized},
		{"readwrite", nil, "", http.StatusOK},
		{"admin", nil, e.Admin, http.StatusOK},
	} {
		for _, path := range []string{"/v1/events", "/v1/events/" + ev.PublicID(), "/v1/assets"} {
			r := e.Do(apptest.Req{Method: http.MethodGet, Path: path, Key: tc.key, Header: tc.header})
			require.Equal(t, tc.want, r.Status, "%s key, %s: %s", tc.name, path, r.Body)
			if tc.want == http.StatusUnauthorized {
				require.Equal(t, "Bearer", r.Header.Get("WWW-Authenticate"), "%s key, %s", tc.name, path)
			}
		}
	}
}
