package app_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
)

// privateServer starts a PostgreSQL server of the test's own (scripts/db.sh
// on a temporary data folder and a free port), so that it can be restarted
// without touching the other tests' server, and returns its URL and a
// function that restarts it at once (pg_ctl -m immediate: to every client,
// a crash).
func privateServer(t *testing.T) (string, func()) {
	t.Helper()
	script, err := filepath.Abs("../../../scripts/db.sh")
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close())
	data := filepath.Join(t.TempDir(), "pg")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	env = append(env, "SVC_PG_DATA="+data, "SVC_PG_PORT="+port)
	run := func(args ...string) string {
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = env
		out, err := cmd.Output()
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		require.NoError(t, err, "scripts/db.sh %v: %s", args, stderr)
		return strings.TrimSpace(string(out))
	}
	lines := strings.Split(run(), "\n")
	t.Cleanup(func() { run("stop") })
	return lines[len(lines)-1], func() { run("restart") }
}

// TestSurvivesADatabaseRestart: PostgreSQL restarted at once under a
// running API and worker. Neither is restarted: requests during the outage
// answer 503 (never 500), and afterwards reads and writes answer again,
// /healthz is ok and the worker's heartbeat resumes, within seconds.
func TestSurvivesADatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server of its own")
	}
	url, restart := privateServer(t)
	t.Setenv("DATABASE_URL", url) // the test's databases are made on its own server
	e := apptest.New(t, apptest.WithWorker())
	// A write that needs no processor: a decision on an unknown withdrawal
	// claims and completes its Idempotency-Key, then answers 404.
	write := func() int {
		return e.AdminPost("/v1/admin/withdrawals/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f/reject", map[string]any{}).Status
	}
	require.Equal(t, http.StatusOK, e.Get("/v1/assets").Status)
	require.Equal(t, http.StatusNotFound, write())

	started := func() (at time.Time) {
		require.NoError(t, e.App.DB.Bun.QueryRowContext(context.Background(), "SELECT pg_postmaster_start_time()").Scan(&at))
		return at
	}
	before := started()
	restarted := time.Now()
	restart()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.Get("/v1/assets")
		require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, r.Status, "during the outage: %s", r.Body)
		if r.Status == http.StatusOK {
			break
		}
		require.True(t, time.Now().Before(deadline), "the API did not recover within 30 s")
		time.Sleep(200 * time.Millisecond)
	}
	apptest.Eventually(t, 30*time.Second, func() bool { return write() == http.StatusNotFound }, "writes answer again")
	require.True(t, started().After(before), "the server really restarted")
	apptest.Eventually(t, 30*time.Second, func() bool { return e.Get("/healthz").Status == http.StatusOK }, "healthz ok")
	apptest.Eventually(t, 30*time.Second, func() bool {
		var last time.Time
		err := e.App.DB.Bun.NewSelect().Table("worker_heartbeats").ColumnExpr("max(beat_at)").Scan(context.Background(), &last)
		return err == nil && last.After(restarted)
	}, "the worker's heartbeat resumes")
}
