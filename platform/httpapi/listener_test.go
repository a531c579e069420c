package httpapi_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"svc/platform/httpapi"
)

// flakyListener fails its first accepts as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: fmt.Errorf("accept4: %w", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func serveOn(t *testing.T, ln net.Listener) (app *fiber.App, served chan error) {
	t.Helper()
	app = httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	app.Get("/ok", func(c *fiber.Ctx) error { return c.SendString("ok") })
	served = make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(time.Second) })
	return app, served
}

// An api out of file descriptors for a moment keeps serving once they are
// back; fasthttp alone would stop the server at the first such error.
func TestListenerSurvivesAcceptErrors(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	flaky := &flakyListener{Listener: raw}
	flaky.failures.Store(4)
	_, served := serveOn(t, httpapi.Listener(flaky, 0, slog.New(slog.DiscardHandler)))

	res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + raw.Addr().String() + "/ok")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.Equal(t, "ok", string(body))
	require.LessOrEqual(t, flaky.failures.Load(), int32(-1), "the failing accepts were retried")
	select {
	case err := <-served:
		t.Fatalf("the server stopped: %v", err)
	default:
	}

	// Without the wrapper the same errors end the server: what the
	// wrapper is for.
	raw2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	flaky2 := &flakyListener{Listener: raw2}
	flaky2.failures.Store(1)
	_, served2 := serveOn(t, flaky2)
	select {
	case err := <-served2:
		require.ErrorIs(t, err, syscall.EMFILE)
	case <-time.After(5 * time.Second):
		t.Fatal("fasthttp kept serving after EMFILE: the wrapper may no longer be needed")
	}
}

func rawGet(c net.Conn, path string) error {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	return readOK(c)
}

func readOK(c net.Conn) error {
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if n < 12 || string(buf[:12]) != "HTTP/1.1 200" {
		return fmt.Errorf("answer %q", buf[:n])
	}
	return nil
}

// At the bound, connections idle between requests are closed to make room
// for a new one; connections in the middle of a request are not, and the
// new one waits until one of them closes.
func TestListenerBoundsConnections(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := httpapi.Listener(raw, 2, slog.New(slog.DiscardHandler))
	app := httpapi.New(httpapi.Options{Log: slog.New(slog.DiscardHandler)})
	app.Server().ConnState = ln.ConnState
	release := make(chan struct{})
	app.Get("/ok", func(c *fiber.Ctx) error { return c.SendString("ok") })
	app.Get("/slow", func(c *fiber.Ctx) error { <-release; return c.SendString("ok") })
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(time.Second) })
	addr := raw.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// Two idle keep-alive connections take both slots; a third client is
	// served at once, and the idle ones are closed.
	idle := []net.Conn{dial(), dial()}
	for _, c := range idle {
		require.NoError(t, rawGet(c, "/ok"))
	}
	third := dial()
	require.NoError(t, third.SetReadDeadline(time.Now().Add(5*time.Second)))
	require.NoError(t, rawGet(third, "/ok"), "a new client is not kept out by idle ones")
	closed := 0
	for _, c := range idle {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			closed++
		}
	}
	require.Positive(t, closed, "an idle connection was closed to make room")
	require.NoError(t, third.Close())

	// Two connections in the middle of a request are never closed: the
	// next one waits for one of them to finish and close.
	busy := []net.Conn{dial(), dial()}
	for _, c := range busy {
		_, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		require.NoError(t, err)
	}
	time.Sleep(200 * time.Millisecond) // both are being served
	waiting := dial()
	require.NoError(t, waiting.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	require.Error(t, rawGet(waiting, "/ok"), "a third connection is served while two requests run")
	close(release)
	for _, c := range busy {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		require.NoError(t, readOK(c), "a running request is not cut")
	}
	require.NoError(t, waiting.SetReadDeadline(time.Now().Add(5*time.Second)))
	require.NoError(t, readOK(waiting), "served once a slot is free")
}
