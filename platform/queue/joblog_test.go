package queue

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// TestJobLogFoldsFailures: during an outage many jobs fail; the log shows
// the first failure, then one line per kind and interval with the count,
// and a job's last attempt at error. Successes write nothing.
func TestJobLogFoldsFailures(t *testing.T) {
	var buf bytes.Buffer
	m := newJobLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	fail := func(context.Context) error {
		return errors.New("poll deposits: btcpay list invoices: unreachable: 503")
	}
	run := func(kind string, attempt int, inner func(context.Context) error) {
		_ = m.Work(ctx, &rivertype.JobRow{ID: 7, Kind: kind, Attempt: attempt, MaxAttempts: 25}, inner)
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }

	run("deposit_poll", 1, func(context.Context) error { return nil })
	require.Empty(t, buf.String(), "a success writes nothing")
	for i := 0; i < 50; i++ {
		run("deposit_poll", 1, fail)
	}
	require.Len(t, lines(), 1, "the first failure is logged, the next ones folded")
	require.Contains(t, lines()[0], "level=WARN")
	require.Contains(t, lines()[0], "kind=deposit_poll")
	require.Contains(t, lines()[0], "unreachable")

	run("processor_webhook", 2, fail)
	require.Len(t, lines(), 2, "another kind has a line of its own")

	now = now.Add(jobLogEvery + time.Second)
	run("deposit_poll", 3, fail)
	require.Len(t, lines(), 3)
	require.Contains(t, lines()[2], "failures_since_last_line=50", "the folded failures are counted")

	run("deposit_poll", 25, fail)
	require.Len(t, lines(), 4)
	require.Contains(t, lines()[3], "level=ERROR", "the last attempt is an error")
	require.Contains(t, lines()[3], "will not be retried")

	// The end of an outage sums up what was folded since the last line
	// (processor_webhook's last line is older than the interval: the
	// first of these is written, the next six folded).
	for i := 0; i < 7; i++ {
		run("processor_webhook", 3, fail)
	}
	require.Len(t, lines(), 5)
	// A run of a single-flight kind skipped because another pass ran did
	// no work: it is no recovery.
	run("processor_webhook", 1, func(ctx context.Context) error { markSkipped(ctx); return nil })
	require.Len(t, lines(), 5, "a skipped run says nothing")
	run("processor_webhook", 1, func(context.Context) error { return nil })
	require.Len(t, lines(), 6)
	require.Contains(t, lines()[5], "succeeding again")
	require.Contains(t, lines()[5], "failures_since_last_line=6")
	run("processor_webhook", 1, func(context.Context) error { return nil })
	require.Len(t, lines(), 6, "nothing more to say")
}
