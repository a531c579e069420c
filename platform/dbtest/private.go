package dbtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrivateServer is a PostgreSQL server of the test's own, started by
// scripts/db.sh on a temporary data folder and a free port, so that it can
// be restarted or killed without touching the other tests' server. It is
// stopped when the test ends.
type PrivateServer struct {
	// URL is the server's svc database (empty, not migrated).
	URL string
	// Data is the server's data folder.
	Data string
	// Name is a standby's application_name (StartStandby), kept when it
	// is rebuilt.
	Name  string
	delay time.Duration
	env   []string
	t     testing.TB
}

// StartPrivateServer starts a private server for t.
func StartPrivateServer(t testing.TB) *PrivateServer {
	t.Helper()
	s := newPrivate(t)
	out := s.run()
	lines := strings.Split(out, "\n")
	s.URL = lines[len(lines)-1]
	t.Cleanup(func() { s.run("stop") })
	return s
}

// newPrivate is a private server not started yet: a temporary data folder
// and a free port.
func newPrivate(t testing.TB) *PrivateServer {
	t.Helper()
	port := strconv.Itoa(FreePort(t))
	s := &PrivateServer{Data: filepath.Join(t.TempDir(), "pg"), t: t}
	s.env = append(scriptEnv(), "SVC_PG_DATA="+s.Data, "SVC_PG_PORT="+port)
	return s
}

// scriptEnv is the test's environment less DATABASE_URL, for the scripts
// that start servers of its own.
func scriptEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return env
}

// Restart restarts the server at once (pg_ctl -m immediate: to every
// client, a crash).
func (s *PrivateServer) Restart() { s.t.Helper(); s.run("restart") }

// Crash stops the server at once (pg_ctl -m immediate); Start brings it
// back on the same data and port.
func (s *PrivateServer) Crash() { s.t.Helper(); s.run("crash") }

// Roles creates the schema owner and the runtime role on the server
// (scripts/db.sh roles) and returns their URLs, for processes run as in
// production: svc migrate as the owner, the rest as the runtime role.
func (s *PrivateServer) Roles() (owner, runtime string) {
	s.t.Helper()
	lines := strings.Split(s.run("roles", s.URL), "\n")
	if len(lines) < 2 {
		s.t.Fatalf("scripts/db.sh roles: expected two URLs, got %q", lines)
	}
	return lines[len(lines)-2], lines[len(lines)-1]
}

// Start starts a crashed or stopped server again.
func (s *PrivateServer) Start() { s.t.Helper(); s.run() }

func (s *PrivateServer) run(args ...string) string {
	s.t.Helper()
	return runScript(s.t, s.env, "db.sh", args...)
}

// runScript runs scripts/NAME of this checkout with env and returns what
// it printed on stdout, trimmed; it fails t with its stderr if it fails.
func runScript(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(ModuleRoot(), "scripts", name)}, args...)...)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("scripts/%s %v: %v: %s", name, args, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// ModuleRoot is the checkout the tests run from: for the harnesses that
// build svc and run scripts/.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// FreePort returns a loopback port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dbtest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
