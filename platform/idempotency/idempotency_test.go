package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/clock"
	"svc/platform/concurrencytest"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
)

// testBundle is a fiber app with one effectful route, POST /v1/effects,
// that inserts a row and completes the key in the same transaction: under
// Middleware, or, when claimIn, under ClaimInHandler, its handler claiming
// the key in its first statement after reading the body.
type testBundle struct {
	db    *db.DB
	url   string
	clock *clock.Fake
	// entered, when non-nil, receives a gate from each attempt as it
	// enters the handler; the attempt waits until its gate is closed.
	entered chan chan struct{}
	fail    atomic.Int32 // answer 503 this many times first
}

func setup(t *testing.T, claimIn bool) *testBundle {
	t.Helper()
	u := dbtest.NewURL(t)
	// The test's own table, created by the schema owner as a migration
	// would, and granted to the runtime role the service connects as.
	owner, err := pgx.Connect(context.Background(), dbtest.OwnerURL(u))
	require.NoError(t, err)
	_, err = owner.Exec(context.Background(), `CREATE TABLE effects (id serial PRIMARY KEY, note text);
GRANT SELECT, INSERT ON effects TO `+dbtest.RuntimeRole+`; GRANT USAGE ON SEQUENCE effects_id_seq TO `+dbtest.RuntimeRole)
	require.NoError(t, err)
	require.NoError(t, owner.Close(context.Background()))
	d, err := db.Open(context.Background(), u, 10)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	b := &testBundle{db: d, clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	store := &idempotency.Store{DB: b.db.Bun, Now: b.clock.Now}
	log := slog.New(slog.DiscardHandler)
	app := httpapi.New(httpapi.Options{Log: log})
	effect := func(c *fiber.Ctx) error {
		var in struct {
			Note string `json:"note"`
		}
		if claimIn {
			// The body first (a refusal before the claim), then the claim
			// in the handler's first statement.
			if err := httpapi.DecodeBody(c, &in); err != nil {
				return err
			}
			var claimed bool
			if err := b.db.Bun.NewSelect().ColumnExpr("? AS claimed", idempotency.FromCtx(c).ClaimExpr()).Scan(c.UserContext(), &claimed); err != nil {
				return err
			}
			if err := idempotency.FromCtx(c).Claimed(claimed); err != nil {
				return err
			}
		}
		if b.entered != nil {
			gate := make(chan struct{})
			b.entered <- gate
			<-gate
		}
		if b.fail.Load() > 0 {
			b.fail.Add(-1)
			return fault.New(fault.Unavailable, "processor unreachable")
		}
		if !claimIn {
			if err := httpapi.DecodeBody(c, &in); err != nil {
				return err
			}
		}
		rec := idempotency.FromCtx(c)
		var body []byte
		err := db.RunInTx(c.UserContext(), b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
			var id int
			if err := tx.NewRaw("INSERT INTO effects (note) VALUES (?) RETURNING id", in.Note).Scan(ctx, &id); err != nil {
				return err
			}
			body, _ = json.Marshal(fiber.Map{"id": id, "note": in.Note})
			return rec.CompleteTx(ctx, tx, http.StatusCreated, fiber.MIMEApplicationJSON, body)
		})
		if err == idempotency.ErrLost {
			return fault.Wrap(fault.Conflict, "this attempt was taken over by a retry", err)
		}
		if err != nil {
			return err
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(http.StatusCreated).Send(body)
	}
	if claimIn {
		app.Post("/v1/effects", store.ClaimInHandler(log, effect))
		app.Post("/v1/admin/effects", store.ClaimInHandler(log, effect))
	} else {
		app.Post("/v1/effects", store.Middleware(log), effect)
		app.Post("/v1/admin/effects", store.Middleware(log), effect)
	}
	app.Get("/v1/effects", func(c *fiber.Ctx) error { return c.SendString("read") })
	httpapi.NotFound(app)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	b.url = "http://" + ln.Addr().String()
	return b
}

type result struct {
	status int
	header http.Header
	body   string
}

func (b *testBundle) post(t *testing.T, path, key, body string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url+path, bytes.NewBufferString(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(rb)}
}

func (b *testBundle) effects(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM effects").Scan(&n))
	return n
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	for _, claimIn := range []bool{false, true} {
		name := "Middleware"
		if claimIn {
			name = "ClaimInHandler"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testIdempotency(t, func(t *testing.T) *testBundle { return setup(t, claimIn) })
		})
	}
}

// testIdempotency checks the package doc's rules on the bundles setup
// makes.
func testIdempotency(t *testing.T, setup func(t *testing.T) *testBundle) {

	t.Run("AdminRoutesHaveTheirOwnKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := strings.Repeat("k", 255) // the longest key, in the admin namespace too
		r := b.post(t, "/v1/effects", key, `{"note":"platform"}`)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		// The same key on an admin route is another record: not 422, and
		// not the platform's answer.
		r = b.post(t, "/v1/admin/effects", key, `{"note":"operator"}`)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.Contains(t, r.body, "operator")
		require.Equal(t, 2, b.effects(t))
		for path, note := range map[string]string{"/v1/effects": "platform", "/v1/admin/effects": "operator"} {
			r = b.post(t, path, key, `{"note":"`+note+`"}`)
			require.Equal(t, http.StatusCreated, r.status, r.body)
			require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
			require.Contains(t, r.body, note)
		}
		require.Equal(t, 2, b.effects(t))
		// A platform client cannot reach into the admin namespace by
		// naming it, nor dodge it by the path's case.
		r = b.post(t, "/v1/effects", "admin:k2", `{"note":"squat"}`)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		r = b.post(t, "/V1/ADMIN/effects", "k2", `{"note":"operator"}`)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.Contains(t, r.body, "operator")
		r = b.post(t, "/V1/ADMIN/effects", "k2", `{"note":"operator"}`)
		require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
		// The same admin record whatever the path's case (the path is part
		// of the request's fingerprint, so another spelling is 422).
		r = b.post(t, "/v1/admin/effects", "k2", `{"note":"operator"}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, r.body)
		require.Equal(t, 4, b.effects(t))
	})

	t.Run("MissingKeyIs400AndChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.post(t, "/v1/effects", "", `{"note":"a"}`)
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Contains(t, r.body, "Idempotency-Key")
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		require.Equal(t, 0, b.effects(t))
	})

	t.Run("SameKeySameBytesReplaysWithOneEffect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, http.StatusCreated, first.status)
		require.Empty(t, first.header.Get(idempotency.ReplayedHeader))
		again := b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, 1, b.effects(t))
	})

	t.Run("SameKeyOtherBytesIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, http.StatusCreated, b.post(t, "/v1/effects", "k1", `{"note":"a"}`).status)
		// Same JSON meaning, other bytes: the hash is over the exact bytes.
		r := b.post(t, "/v1/effects", "k1", `{"note": "a"}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.status)
		require.Contains(t, r.body, "different request")
		require.Equal(t, 1, b.effects(t))
	})

	t.Run("SameKeyOtherRouteIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, http.StatusCreated, b.post(t, "/v1/effects", "k1", `{"note":"a"}`).status)
		r := b.post(t, "/v1/effects?x=1", "k1", `{"note":"a"}`) // same path: query does not count
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, 1, b.effects(t))
	})

	t.Run("ClientErrorsAreFinal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.post(t, "/v1/effects", "k1", `not json`)
		require.Equal(t, http.StatusUnprocessableEntity, r.status)
		again := b.post(t, "/v1/effects", "k1", `not json`)
		require.Equal(t, r.body, again.body)
		require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
	})

	t.Run("ServerErrorsAreNotFinal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fail.Store(1)
		r := b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.Equal(t, 0, b.effects(t))
		r = b.post(t, "/v1/effects", "k1", `{"note":"a"}`) // at once, no 409: the key was released
		require.Equal(t, http.StatusCreated, r.status)
		require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, 1, b.effects(t))
		// Even after a 5xx the key stays bound to its body.
		require.Equal(t, http.StatusUnprocessableEntity, b.post(t, "/v1/effects", "k1", `{"note":"b"}`).status)
	})

	t.Run("InFlightDuplicateIs409WithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.entered = make(chan chan struct{}, 1)
		done := make(chan result, 1)
		go func() { done <- b.post(t, "/v1/effects", "k1", `{"note":"a"}`) }()
		gate := <-b.entered
		r := b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, http.StatusConflict, r.status)
		require.Equal(t, "1", r.header.Get("Retry-After"), "a young attempt: probably finishing")
		// An attempt that old is probably dead: the answer says when the
		// retry can take it over instead of "1" for a minute.
		b.clock.Advance(20 * time.Second)
		r = b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, http.StatusConflict, r.status)
		require.Equal(t, "41", r.header.Get("Retry-After"))
		b.clock.Advance(39 * time.Second)
		r = b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, "2", r.header.Get("Retry-After"))
		close(gate)
		require.Equal(t, http.StatusCreated, (<-done).status)
		require.Equal(t, 1, b.effects(t))
	})

	t.Run("DeadAttemptIsTakenOverAfter60sAndAppliesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.entered = make(chan chan struct{}, 2)
		stale := make(chan result, 1)
		go func() { stale <- b.post(t, "/v1/effects", "k1", `{"note":"a"}`) }()
		staleGate := <-b.entered // attempt 1 holds the key and is stuck

		b.clock.Advance(59 * time.Second)
		require.Equal(t, http.StatusConflict, b.post(t, "/v1/effects", "k1", `{"note":"a"}`).status, "not yet 60 s")

		b.clock.Advance(2 * time.Second)
		takeover := make(chan result, 1)
		go func() { takeover <- b.post(t, "/v1/effects", "k1", `{"note":"a"}`) }()
		close(<-b.entered) // let the takeover finish first
		r := <-takeover
		require.Equal(t, http.StatusCreated, r.status)
		close(staleGate) // now the first attempt wakes up and tries to commit
		require.Equal(t, http.StatusConflict, (<-stale).status, "the first attempt lost its key and rolled back")
		require.Equal(t, 1, b.effects(t))
		replay := b.post(t, "/v1/effects", "k1", `{"note":"a"}`)
		require.Equal(t, r.body, replay.body)
	})

	t.Run("StormOf100IdenticalRequestsHasOneEffect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		results := make([]result, 100)
		concurrencytest.AtOnce(len(results), func(i int) {
			results[i] = b.post(t, "/v1/effects", "storm", `{"note":"storm"}`)
		})
		var created, conflicts int
		var body string
		for _, r := range results {
			switch r.status {
			case http.StatusCreated:
				created++
				if body == "" {
					body = r.body
				}
				require.Equal(t, body, r.body, "every success is the same response")
			case http.StatusConflict:
				conflicts++
			default:
				t.Fatalf("unexpected %d %s", r.status, r.body)
			}
		}
		require.Equal(t, 100, created+conflicts)
		require.Positive(t, created)
		require.Equal(t, 1, b.effects(t), "exactly one effect")
	})

	t.Run("PruneDeletesOldRecords", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, http.StatusCreated, b.post(t, "/v1/effects", "old", `{"note":"a"}`).status)
		b.clock.Advance(8 * 24 * time.Hour)
		require.Equal(t, http.StatusCreated, b.post(t, "/v1/effects", "new", `{"note":"b"}`).status)
		store := &idempotency.Store{DB: b.db.Bun, Now: b.clock.Now}
		n, err := store.Prune(context.Background(), b.clock.Now().Add(-7*24*time.Hour))
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	})
}

func ExampleHash() {
	fmt.Printf("%x\n", idempotency.Hash("POST", "/v1/deposits", []byte(`{}`))[:4])
	// Output: a52af25e
}
