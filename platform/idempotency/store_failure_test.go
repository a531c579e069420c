package idempotency_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/platform/clock"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
)

// An answer whose record cannot be stored (the database gone between the
// handler and the store: a failover) is not sent: the client gets the
// failure and the key is released, so its retry runs again and every
// later replay answers what that retry stored. The fault harness saw a
// 402 sent, then the same key answering 409 "still in flight".
func TestAnAnswerThatCannotBeStoredIsNotSent(t *testing.T) {
	t.Parallel()
	u := dbtest.NewURL(t)
	owner, err := pgx.Connect(context.Background(), dbtest.OwnerURL(u))
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close(context.Background()) })
	d, err := db.Open(context.Background(), u, 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)

	store := &idempotency.Store{DB: d.Bun, Now: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Now}
	log := slog.New(slog.DiscardHandler)
	app := httpapi.New(httpapi.Options{Log: log})
	var calls atomic.Int32
	app.Post("/v1/refuse", store.Middleware(log), func(c *fiber.Ctx) error {
		if calls.Add(1) == 1 {
			// The first attempt's answer will not be stored.
			if _, err := owner.Exec(c.UserContext(), "REVOKE UPDATE ON idempotency_keys FROM "+dbtest.RuntimeRole); err != nil {
				return err
			}
		}
		return fault.New(fault.InsufficientFunds, "insufficient available balance")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })
	b := &testBundle{url: "http://" + ln.Addr().String()}

	first := b.post(t, "/v1/refuse", "k-lost", `{}`)
	require.GreaterOrEqual(t, first.status, 500, "an answer the key does not keep is not sent: %s", first.body)
	_, err = owner.Exec(context.Background(), "GRANT UPDATE ON idempotency_keys TO "+dbtest.RuntimeRole)
	require.NoError(t, err)

	var again result
	require.Eventually(t, func() bool {
		again = b.post(t, "/v1/refuse", "k-lost", `{}`)
		return again.status != http.StatusConflict // until the key is released
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, http.StatusPaymentRequired, again.status, again.body)
	replay := b.post(t, "/v1/refuse", "k-lost", `{}`)
	require.Equal(t, again.status, replay.status)
	require.Equal(t, again.body, replay.body)
	require.Equal(t, int32(2), calls.Load(), "the retry ran the handler again; the replay did not")
}
