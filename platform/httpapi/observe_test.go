package httpapi_test

import (
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"svc/platform/fault"
	"svc/platform/httpapi"
)

// TestObserveGivesRouteTemplates: Observe sees every answered request with
// the route's template, never the path with its ids, and the final status
// (the error handler's too); requests no route served are "unmatched", and
// those a group's middleware refused carry the group's prefix.
func TestObserveGivesRouteTemplates(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, route string
		status        int
	}
	var (
		mu  sync.Mutex
		got []seen
	)
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler), Observe: func(method, route string, status int, took time.Duration) {
		require.GreaterOrEqual(t, took, time.Duration(0))
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{method, route, status})
	}})
	app.Get("/things/:thing_id", func(c *fiber.Ctx) error { return c.SendString(c.Params("thing_id")) })
	app.Post("/things/:thing_id/fail", func(*fiber.Ctx) error { return fault.New(fault.Conflict, "no") })
	keyed := app.Group("/v1", func(c *fiber.Ctx) error {
		if c.Get("Authorization") == "" {
			return fault.New(fault.Unauthenticated, "missing key")
		}
		return c.Next()
	})
	keyed.Get("/private/:id", func(c *fiber.Ctx) error { return c.SendStatus(204) })
	httpapi.NotFound(app)

	for _, r := range []struct{ method, path string }{
		{"GET", "/things/3f1c2a"},
		{"GET", "/things/another-id"},
		{"POST", "/things/3f1c2a/fail"},
		{"GET", "/nowhere/3f1c2a"},
		{"DELETE", "/things/3f1c2a"},
		{"GET", "/v1/private/3f1c2a"},
	} {
		_, err := app.Test(httptest.NewRequest(r.method, r.path, nil))
		require.NoError(t, err)
	}
	req := httptest.NewRequest("GET", "/v1/private/3f1c2a", nil)
	req.Header.Set("Authorization", "Bearer k")
	_, err := app.Test(req)
	require.NoError(t, err)

	require.Equal(t, []seen{
		{"GET", "/things/:thing_id", 200},
		{"GET", "/things/:thing_id", 200},
		{"POST", "/things/:thing_id/fail", 409},
		{"GET", httpapi.UnmatchedRoute, 404},
		{"DELETE", httpapi.UnmatchedRoute, 405},
		{"GET", "/v1", 401},
		{"GET", "/v1/private/:id", 204},
	}, got)
}
