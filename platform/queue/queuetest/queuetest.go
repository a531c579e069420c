// Package queuetest runs River workers in tests: started at once, and
// stopped when the test ends.
package queuetest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
)

// Start starts the worker client c, failing the test if it cannot, and
// stops it when the test ends, giving its running jobs up to grace to
// finish.
func Start(t testing.TB, c *river.Client[pgx.Tx], grace time.Duration) {
	t.Helper()
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		_ = c.Stop(ctx)
	})
}
