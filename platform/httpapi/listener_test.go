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

// At the bound, a new connection waits until one closes; it is not
// refused and nothing else is opened.
func TestListenerBoundsConnections(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, httpapi.Listener(raw, 2, slog.New(slog.DiscardHandler)))
	addr := raw.Addr().String()

	get := func(c net.Conn) error {
		if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:12]) != "HTTP/1.1 200" {
			return fmt.Errorf("answer %q", buf[:n])
		}
		return nil
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, get(c))
		held = append(held, c)
	}

	third, err := net.Dial("tcp", addr) // the kernel completes the handshake
	require.NoError(t, err)
	t.Cleanup(func() { _ = third.Close() })
	require.NoError(t, third.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	require.Error(t, get(third), "a third connection is served while two are open")

	require.NoError(t, held[0].Close())
	require.NoError(t, third.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 512)
	n, err := third.Read(buf) // the request written above is served now
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 200", string(buf[:12]), "%s", buf[:n])
}
