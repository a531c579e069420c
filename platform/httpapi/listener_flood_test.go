package httpapi_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"svc/platform/httpapi"
)

// A flood of more keep-alive clients than the bound: every request is
// answered, slots are freed by ending idle connections, and the server
// keeps serving (closing a connection under fasthttp made it panic).
func TestListenerUnderAFlood(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := httpapi.Listener(raw, 128, slog.New(slog.DiscardHandler))
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	app.Server().ConnState = ln.ConnState
	app.Get("/ok", func(c *fiber.Ctx) error { time.Sleep(5 * time.Millisecond); return c.SendString("ok") })
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	url := "http://" + raw.Addr().String() + "/ok"
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 1000; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			for i := 0; i < 4; i++ {
				r, err := cl.Get(url)
				if err != nil {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-served:
		t.Fatalf("server stopped: %v", err)
	default:
	}
	require.Zero(t, bad.Load(), "every request answered")
	require.EqualValues(t, 4000, ok.Load())
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(time.Second) })
}
