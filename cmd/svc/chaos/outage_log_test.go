package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/btcpay/btcpaysim"
)

// jobLine is a worker log line about failing jobs (platform/queue's job
// log), as the JSON handler writes it.
type jobLine struct {
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	Kind   string `json:"kind"`
	Folded int    `json:"failures_since_last_line"`
	Error  string `json:"error"`
}

// jobLines reads the job log lines of every worker's log.
func (c *cluster) jobLines(t *testing.T) []jobLine {
	t.Helper()
	var out []jobLine
	for _, w := range c.workers {
		f, err := os.Open(w.Log)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l jobLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Kind != "" && strings.Contains(l.Msg, "job") {
				out = append(out, l)
			}
		}
		f.Close()
	}
	return out
}

// TestProcessorOutageIsLogged: the processor answers 503 to everything for
// twelve seconds while the real workers poll open deposits every second.
// At LOG_LEVEL=info the worker logs say so at warn from the first failure,
// with the job's kind and the error's class; the repeated failures are
// folded (a few lines, not one per failure) and the end of the outage sums
// up how many were folded. No key or secret appears in any process's log.
func TestProcessorOutageIsLogged(t *testing.T) {
	// Its own cluster and server: it runs beside the other scenarios
	// once TestChaos is done.
	t.Parallel()
	c := startCluster(t, scenarioDir(t), "DEPOSIT_POLL_INTERVAL=1s")
	d := newDriver(t, c, &violations{}, 1)
	d.waitAssets(t)
	ctx := context.Background()
	d.newDeposit(t, "outage-log-1") // open deposits: the poll asks the processor about them
	d.newDeposit(t, "outage-log-2")

	c.sim.GoDown(btcpaysim.DownError)
	time.Sleep(12 * time.Second)
	c.sim.Up()

	recovered := func() bool {
		for _, l := range c.jobLines(t) {
			if l.Kind == "deposit_poll" && strings.Contains(l.Msg, "succeeding again") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, recovered, 20*time.Second, 200*time.Millisecond, "the end of the outage is logged")

	var failures int // every failed attempt of every job, as River recorded it
	require.NoError(t, c.db.Bun.QueryRowContext(ctx,
		"SELECT coalesce(sum(coalesce(array_length(errors, 1), 0)), 0) FROM river_job").Scan(&failures))
	lines := c.jobLines(t)
	kinds := map[string]bool{}
	logged := 0 // failures the lines account for
	for _, l := range lines {
		require.Equal(t, "WARN", l.Level, "nothing gave up: %+v", l)
		kinds[l.Kind] = true
		switch {
		case strings.Contains(l.Msg, "job failed"):
			logged++
			require.Contains(t, l.Error, "unreachable", "the error's class is named: %+v", l)
		default:
			require.Positive(t, l.Folded, "a summary line counts what it folded: %+v", l)
			logged += l.Folded
		}
	}
	t.Logf("%d failed attempts during the outage, written as %d lines: %+v", failures, len(lines), lines)
	require.GreaterOrEqual(t, failures, 10, "the outage made jobs fail")
	require.True(t, kinds["deposit_poll"], "the failing poll is named")
	// Per worker and kind: the first failure, then at most one line per
	// 30 s interval (none in 12 s) and the recovery line; one more for a
	// retry that lands between the processor's return and the kind's
	// next failure-free run.
	require.LessOrEqual(t, len(lines), 3*len(kinds)*len(c.workers), "failures are folded")
	require.Less(t, len(lines), failures, "fewer lines than failures")
	require.LessOrEqual(t, logged, failures, "the lines count no failure twice")

	secrets := []string{c.sim.APIKey(), processorSecret, platformSecret, c.rwKey, c.admKey}
	for _, p := range c.procs() {
		raw, err := os.ReadFile(p.Log)
		require.NoError(t, err)
		for _, s := range secrets {
			require.NotContains(t, string(raw), s, "%s's log holds a secret", p.Name)
		}
	}
}
