package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/dbtest"
)

// TestSurvivesADatabaseRestart: PostgreSQL restarted at once under a
// running API and worker. Neither is restarted: requests during the outage
// answer 503 (never 500), and afterwards reads and writes answer again,
// /healthz is ok and the worker's heartbeat resumes, within seconds.
func TestSurvivesADatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server of its own")
	}
	pg := dbtest.StartPrivateServer(t)
	t.Setenv("DATABASE_URL", pg.URL) // the test's databases are made on its own server
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
	pg.Restart()
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

	// A longer outage: the server down for seconds. /healthz and /readyz
	// say so (503, the database unreachable), requests answer 503, and all
	// of it comes back once the server does, still without a restart.
	pg.Crash()
	h := e.Get("/healthz")
	require.Equal(t, http.StatusServiceUnavailable, h.Status, string(h.Body))
	require.Equal(t, "unreachable", h.Map(t)["database"])
	rz := e.Get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rz.Status, string(rz.Body))
	require.Contains(t, string(rz.Body), `"degraded"`)
	for _, r := range []*apptest.Response{e.Get("/v1/assets"), e.AdminPost("/v1/admin/withdrawals/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f/reject", map[string]any{})} {
		require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
		require.Equal(t, "1", r.Header.Get("Retry-After"), "a database outage says to come back soon")
	}
	time.Sleep(2 * time.Second)
	pg.Start()
	back := time.Now()
	apptest.Eventually(t, 30*time.Second, func() bool { return e.Get("/healthz").Status == http.StatusOK }, "healthz ok after the outage")
	apptest.Eventually(t, 30*time.Second, func() bool { return e.Get("/v1/assets").Status == http.StatusOK }, "reads answer after the outage")
	apptest.Eventually(t, 30*time.Second, func() bool { return write() == http.StatusNotFound }, "writes answer after the outage")
	t.Logf("reads, writes and /healthz answered %s after the server was back", time.Since(back).Round(time.Millisecond))
}

// TestReadOnlyDatabaseAnswers503: a database that refuses writes (here
// read-only, as a standby after a failover or default_transaction_read_only;
// a full disk or too many connections are classified alike) makes writes
// answer 503 with Retry-After and a plain detail, never 500, and nothing
// changes; once it takes writes again, the same request succeeds.
//
// Not parallel: what requests saw refused is process-wide (db.LastRefusal),
// and other tests read /readyz.
func TestReadOnlyDatabaseAnswers503(t *testing.T) {
	e := apptest.New(t)
	ctx := context.Background()
	var name string
	require.NoError(t, e.App.DB.Bun.QueryRowContext(ctx, "SELECT current_database()").Scan(&name))
	admin, err := pgx.Connect(ctx, dbtest.AdminURL(t)) // another database of the server
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	readOnly := func(on bool) {
		setting := "SET default_transaction_read_only = on"
		if !on {
			setting = "RESET default_transaction_read_only"
		}
		_, err := admin.Exec(ctx, "ALTER DATABASE "+name+" "+setting)
		require.NoError(t, err)
		// New sessions take the setting: end the service's.
		_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
		require.NoError(t, err)
		e.App.DB.Pool.Reset()
	}
	// A write that needs no processor: a decision on an unknown withdrawal
	// claims its Idempotency-Key, then answers 404.
	write := func() *apptest.Response {
		return e.AdminPost("/v1/admin/withdrawals/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f/reject", map[string]any{})
	}
	readOnly(true)
	var r *apptest.Response
	apptest.Eventually(t, 10*time.Second, func() bool {
		r = write()
		require.NotEqual(t, http.StatusInternalServerError, r.Status, string(r.Body))
		return r.Status == http.StatusServiceUnavailable && !strings.Contains(string(r.Body), "connection was lost")
	}, "writes refused as a dependency")
	require.Contains(t, string(r.Body), "retry with the same Idempotency-Key")
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	require.Equal(t, http.StatusOK, e.Get("/v1/assets").Status, "reads still answer")
	require.Equal(t, "degraded", readyDatabase(t, e), "readiness sees writes refused")
	require.Equal(t, http.StatusOK, e.Get("/healthz").Status, "the process is alive: liveness is not readiness")
	readOnly(false)
	apptest.Eventually(t, 15*time.Second, func() bool { return readyDatabase(t, e) == "ok" }, "readiness sees writes taken again")
	apptest.Eventually(t, 10*time.Second, func() bool { r = write(); return r.Status == http.StatusNotFound }, "writes taken again")
}

// TestFullDiskAnswers503: the database's disk fills up. The idempotency
// table lives on a small filesystem of its own (a tmpfs mounted for the
// test, a tablespace on it) that is then filled to the last byte, so
// PostgreSQL itself refuses the next write with 53100 (could not extend
// file: no space left on device), as on a production server whose volume
// is full. Writes answer 503 with a plain detail and Retry-After, never 500;
// reads still answer; /readyz shows the database degraded while /healthz
// stays ok; once space is freed, readiness recovers and the same request
// succeeds. Needs root to mount the filesystem; skipped otherwise.
//
// Not parallel, for the reason TestReadOnlyDatabaseAnswers503 gives.
func TestFullDiskAnswers503(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a filesystem")
	}
	ctx := context.Background()
	e := apptest.New(t)
	var name string
	require.NoError(t, e.App.DB.Bun.QueryRowContext(ctx, "SELECT current_database()").Scan(&name))
	admin, err := pgx.Connect(ctx, dbtest.AdminURLOf(t, e.DBURL)) // a superuser, in the test's database
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	var dataDir string
	require.NoError(t, admin.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir))
	if !filepath.IsAbs(dataDir) {
		t.Skip("the database server is not on this machine")
	}
	server, err := os.Stat(dataDir)
	if err != nil {
		t.Skipf("the database server is not on this machine: %v", err)
	}
	dir, err := os.MkdirTemp("", "svc-full-disk-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755)) // the server's user walks into it
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small filesystem here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	uid := server.Sys().(*syscall.Stat_t).Uid
	space := filepath.Join(dir, "pg")
	require.NoError(t, os.Mkdir(space, 0o700))
	require.NoError(t, os.Chown(space, int(uid), -1))

	tablespace := "svc_full_" + name
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE TABLESPACE %s LOCATION '%s'", tablespace, space))
	require.NoError(t, err)
	t.Cleanup(func() {
		// Back to the default tablespace, so that the test's database can
		// be dropped and the tablespace with it.
		_, _ = admin.Exec(context.Background(), "ALTER TABLE idempotency_keys SET TABLESPACE pg_default")
		_, _ = admin.Exec(context.Background(), "DROP TABLESPACE "+tablespace)
	})
	_, err = admin.Exec(ctx, "TRUNCATE idempotency_keys") // no free space in a page: the next insert extends the file
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ALTER TABLE idempotency_keys SET TABLESPACE "+tablespace)
	require.NoError(t, err)

	fill := filepath.Join(dir, "fill")
	f, err := os.Create(fill)
	require.NoError(t, err)
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break // the filesystem is full
		}
	}
	_ = f.Close()

	// A write that needs no processor: a decision on an unknown withdrawal
	// claims its Idempotency-Key (an insert into the full table), then
	// answers 404.
	const key = "full-disk-1"
	write := func() *apptest.Response {
		return e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/admin/withdrawals/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f/reject",
			Body: map[string]any{}, Key: e.Admin, Idem: key})
	}
	r := write()
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "retry with the same Idempotency-Key")
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM idempotency_keys").Scan(&n))
	require.Zero(t, n, "nothing was written")
	require.Equal(t, http.StatusOK, e.Get("/v1/assets").Status, "reads still answer")
	require.Equal(t, "degraded", readyDatabase(t, e), "readiness sees writes refused")
	require.Equal(t, http.StatusOK, e.Get("/healthz").Status, "the process is alive: liveness is not readiness")

	require.NoError(t, os.Remove(fill)) // the operator frees space
	apptest.Eventually(t, 15*time.Second, func() bool { return readyDatabase(t, e) == "ok" }, "readiness sees writes taken again")
	r = write()
	require.Equal(t, http.StatusNotFound, r.Status, "the same request succeeds once there is space: %s", r.Body)
}

// readyDatabase is the status of the database component of /readyz.
func readyDatabase(t *testing.T, e *apptest.Env) string {
	var b struct {
		Components []struct{ Name, Status string } `json:"components"`
	}
	e.Get("/readyz").JSON(t, &b)
	for _, c := range b.Components {
		if c.Name == "database" {
			return c.Status
		}
	}
	return ""
}
