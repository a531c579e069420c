package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/jobs"
)

// TestRiverUIRequiresAnAdminKey: the River UI, its page and its API alike,
// answers nothing without credentials but a Basic challenge, refuses a
// readwrite key and a key that does not authenticate, and serves an admin
// key; it refuses a change sent from another site's page, and an
// operator's retry of a failed job works.
func TestRiverUIRequiresAnAdminKey(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := e.App.RiverUI(ctx)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	do := func(method, path, key, origin, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			req.SetBasicAuth("operator", key)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, res.Header, string(b)
	}

	for _, path := range []string{"/", "/jobs", "/api/jobs?state=available", "/api/queues"} {
		status, hdr, body := do("GET", path, "", "", "")
		require.Equal(t, http.StatusUnauthorized, status, path)
		require.Contains(t, hdr.Get("WWW-Authenticate"), `Basic realm="svc River UI"`, path)
		require.NotContains(t, body, "job", path)

		status, _, _ = do("GET", path, e.RW, "", "")
		require.Equal(t, http.StatusForbidden, status, "%s: a readwrite key is refused", path)

		status, hdr, _ = do("GET", path, e.RW[:len(e.RW)-1]+"x", "", "")
		require.Equal(t, http.StatusUnauthorized, status, path)
		require.NotEmpty(t, hdr.Get("WWW-Authenticate"))

		status, _, body = do("GET", path, e.Admin, "", "")
		require.Equal(t, http.StatusOK, status, "%s: an admin key is served", path)
		require.NotEmpty(t, body)
	}
	status, _, body := do("GET", "/", e.Admin, "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "<html")

	// A failed job, retried by the operator.
	ins, err := river.NewClient(riverpgxv5.New(e.App.DB.Pool), &river.Config{})
	require.NoError(t, err)
	res, err := ins.Insert(ctx, jobs.HeartbeatArgs{}, nil)
	require.NoError(t, err)
	_, err = e.App.DB.Pool.Exec(ctx, "UPDATE river_job SET state = 'discarded', attempt = max_attempts, finalized_at = now() WHERE id = $1", res.Job.ID)
	require.NoError(t, err)
	status, _, body = do("GET", "/api/jobs/"+strconv.FormatInt(res.Job.ID, 10), e.Admin, "", "")
	require.Equal(t, http.StatusOK, status, body)
	var job struct {
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &job))
	require.Equal(t, "discarded", job.State)

	retry := `{"ids":["` + strconv.FormatInt(res.Job.ID, 10) + `"]}`
	status, _, _ = do("POST", "/api/jobs/retry", e.Admin, "https://elsewhere.example", retry)
	require.Equal(t, http.StatusForbidden, status, "a change from another site's page is refused")
	status, _, _ = do("POST", "/api/jobs/retry", e.RW, srv.URL, retry)
	require.Equal(t, http.StatusForbidden, status)
	status, _, body = do("POST", "/api/jobs/retry", e.Admin, srv.URL, retry)
	require.Equal(t, http.StatusOK, status, body)
	var state string
	require.NoError(t, e.App.DB.Pool.QueryRow(ctx, "SELECT state FROM river_job WHERE id = $1", res.Job.ID).Scan(&state))
	require.Equal(t, "available", state, "retried")
}
