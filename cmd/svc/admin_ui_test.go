package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/logtest"
)

// TestAdminUI: svc admin ui listens where it says, serves the River UI to
// an admin key only, and stops when interrupted.
func TestAdminUI(t *testing.T) {
	u := dbtest.NewURL(t)
	t.Setenv("DATABASE_URL", u)
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	d, err := db.Open(context.Background(), u, 2)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	t.Setenv(KeyEnv, operatorKeys(t, d, operatortest.Member{Name: "ada", Role: operator.Admin})["ada"])
	out, err := run(t, "admin", "keys", "mint", "--scope", "admin", "--label", "ops")
	require.NoError(t, err, out)
	admin := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	out, err = run(t, "admin", "keys", "mint", "--scope", "readwrite", "--label", "backend")
	require.NoError(t, err, out)
	rw := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var buf logtest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&buf)
	cmd.SetErr(&buf)
	cmd.SetArgs([]string{"admin", "ui", "--addr", "127.0.0.1:0"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	re := regexp.MustCompile(`River UI on (http://127\.0\.0\.1:\d+/)`)
	require.Eventually(t, func() bool { return re.MatchString(buf.String()) }, 10*time.Second, 20*time.Millisecond, buf.String())
	url := re.FindStringSubmatch(buf.String())[1]

	get := func(key string) int {
		req, err := http.NewRequest("GET", url+"api/jobs", nil)
		require.NoError(t, err)
		if key != "" {
			req.SetBasicAuth("ops", key)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(""))
	require.Equal(t, http.StatusForbidden, get(rw))
	require.Equal(t, http.StatusOK, get(admin))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("svc admin ui did not stop")
	}
}

// TestAdminUIStaysOnLoopbackInProduction: in production svc admin ui
// refuses a non-loopback --addr, as it refuses such an ADMIN_UI_ADDR,
// before it connects to anything, unless ADMIN_UI_ALLOW_NON_LOOPBACK is
// true.
func TestAdminUIStaysOnLoopbackInProduction(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://svc@127.0.0.1:1/svc?sslmode=disable&connect_timeout=1")
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	t.Setenv("SVC_ENV", "production")
	t.Setenv("API_KEY_MODE", "live")
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.1.2.3:8092"} {
		out, err := run(t, "admin", "ui", "--addr", addr)
		require.Error(t, err, out)
		require.Contains(t, err.Error(), "ADMIN_UI_ADDR: must be a loopback address", addr)
	}
	t.Setenv("ADMIN_UI_ADDR", "0.0.0.0:8092")
	_, err := run(t, "admin", "ui")
	require.ErrorContains(t, err, "ADMIN_UI_ADDR: must be a loopback address")

	// Allowed: the address is taken, and the command goes on to the
	// database (unreachable here).
	t.Setenv("ADMIN_UI_ALLOW_NON_LOOPBACK", "true")
	_, err = run(t, "admin", "ui", "--addr", "0.0.0.0:0")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "ADMIN_UI_ADDR")
}
