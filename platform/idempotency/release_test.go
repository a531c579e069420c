package idempotency

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReleaseLater: a release that failed (the database down as the
// request failed) is retried in the background until it succeeds, so the
// key is free as soon as the database is back rather than after the
// takeover.
func TestReleaseLater(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	done := make(chan struct{})
	release := func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("failed to connect: connection refused")
		}
		close(done)
		return nil
	}
	releaseLater(release, 10*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the release was not retried until it succeeded")
	}
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, int64(3), calls.Load(), "no release after the one that succeeded")
}
