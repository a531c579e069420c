package dbtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A pg_auto_failover formation of a test's own (scripts/autofailover.sh):
// a monitor and keeper-managed nodes on free ports under one temporary
// folder, which the monitor fails over by itself. The script installs
// Debian's pg_auto_failover package when pg_autoctl is missing. Everything
// is stopped when the test ends.

// AutoFailover is a formation: its monitor and the nodes added to it.
type AutoFailover struct {
	// Monitor is the monitor's database (pg_auto_failover) as a superuser:
	// its pgautofailover.node and pgautofailover.event tables.
	Monitor string
	// register is the URL the nodes register with (autoctl_node).
	register string
	dir      string
	env      []string
	t        testing.TB
}

// AutoFailoverOptions are a formation's settings.
type AutoFailoverOptions struct {
	// DefaultTimeouts keeps pg_auto_failover's own detection settings
	// instead of the script's (scripts/autofailover.sh lists both).
	DefaultTimeouts bool
}

// AutoNode is a node of a formation. Its PrivateServer gives its URL, port
// and queries; its PostgreSQL belongs to its keeper, so db.sh's Kill,
// Crash, Restart, Promote and RebuildAsStandby are not for it: KillHost
// and StartKeeper are.
type AutoNode struct {
	*PrivateServer
	// ID is the node's id in the monitor; its standby's application_name
	// is pgautofailover_standby_ID.
	ID  int
	dir string
	f   *AutoFailover
}

// StartAutoFailover creates and starts a monitor.
func StartAutoFailover(t testing.TB, o AutoFailoverOptions) *AutoFailover {
	t.Helper()
	f := &AutoFailover{dir: t.TempDir(), env: scriptEnv(), t: t}
	if o.DefaultTimeouts {
		f.env = append(f.env, "SVC_PAF_TIMEOUTS=default")
	}
	port := strconv.Itoa(FreePort(t))
	dir := filepath.Join(f.dir, "monitor")
	t.Cleanup(func() { f.script("stop", dir) })
	f.register = lastLine(f.script("monitor", dir, port))
	f.Monitor = "postgres://svc@127.0.0.1:" + port + "/pg_auto_failover?sslmode=disable"
	return f
}

// AddNode creates a node named name and starts its keeper; it returns
// once the monitor reports it single (the first node: a primary with no
// standby yet) or secondary (a later one, copied from the primary).
// Its URL is the svc database as the superuser svc.
func (f *AutoFailover) AddNode(name string) *AutoNode {
	f.t.Helper()
	port := strconv.Itoa(FreePort(f.t))
	dir := filepath.Join(f.dir, name)
	f.t.Cleanup(func() { f.script("stop", dir) })
	url := lastLine(f.script("node", dir, port, name, f.register))
	n := &AutoNode{dir: dir, f: f, PrivateServer: &PrivateServer{URL: url, Data: filepath.Join(dir, "pg"), Name: name,
		env: append(scriptEnv(), "SVC_PG_DATA="+filepath.Join(dir, "pg"), "SVC_PG_PORT="+port), t: f.t}}
	f.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), "SELECT nodeid FROM pgautofailover.node WHERE nodename = $1", name).Scan(&n.ID)
	})
	return n
}

// ApplicationName is the node's name in its primary's
// pg_stat_replication while it is a standby.
func (n *AutoNode) ApplicationName() string { return fmt.Sprintf("pgautofailover_standby_%d", n.ID) }

// KillHost sends SIGKILL to the node's keeper and its PostgreSQL at once,
// as the loss of its host would, and returns once all their processes have
// exited. The monitor notices by itself.
func (n *AutoNode) KillHost() { n.t.Helper(); n.f.script("kill", n.dir) }

// StartKeeper starts the node's keeper again (pg_autoctl run), as the
// node's host coming back would. It returns the length of the keeper's
// log before, for RebuildMethod.
func (n *AutoNode) StartKeeper() int64 {
	n.t.Helper()
	var from int64
	if st, err := os.Stat(n.KeeperLog()); err == nil {
		from = st.Size()
	}
	n.f.script("start", n.dir)
	return from
}

// KeeperLog is the path of the keeper's log.
func (n *AutoNode) KeeperLog() string { return filepath.Join(n.dir, "keeper.log") }

// RebuildMethod says how the keeper rebuilt the node as a standby since
// its log had from bytes: "pg_basebackup" when it ran one, "pg_rewind"
// when it rewound the node, "" when it did neither.
func (n *AutoNode) RebuildMethod(from int64) string {
	f, err := os.Open(n.KeeperLog())
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	how := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// pg_autoctl logs each command it runs, its path first.
		switch l := sc.Text(); {
		case strings.Contains(l, "/pg_basebackup "):
			return "pg_basebackup"
		case strings.Contains(l, "/pg_rewind "):
			how = "pg_rewind"
		}
	}
	return how
}

// SetSynchronousCommit sets the node's synchronous_commit with ALTER
// SYSTEM and reloads (synchronous_standby_names is the monitor's).
func (n *AutoNode) SetSynchronousCommit(v string) {
	n.t.Helper()
	n.query(func(c *pgx.Conn) error {
		ctx := context.Background()
		if _, err := c.Exec(ctx, "ALTER SYSTEM SET synchronous_commit = "+quoteLiteral(v)); err != nil {
			return err
		}
		_, err := c.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	})
}

// WaitStates waits until each named node's reported state and goal state
// are the state given for it (primary, secondary, ...), for at most within.
func (f *AutoFailover) WaitStates(within time.Duration, want map[string]string) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := f.States()
		ok := true
		for name, state := range want {
			if got[name] != state+"/"+state {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("dbtest: pg_auto_failover nodes not in %v after %s: reported/goal %v", want, within, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// States is each node's "reported/goal" state as the monitor has them.
func (f *AutoFailover) States() map[string]string {
	f.t.Helper()
	out := map[string]string{}
	f.query(func(c *pgx.Conn) error {
		rows, err := c.Query(context.Background(), "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, reported, goal string
			if err := rows.Scan(&name, &reported, &goal); err != nil {
				return err
			}
			out[name] = reported + "/" + goal
		}
		return rows.Err()
	})
	return out
}

// AutoEvent is one of the monitor's events: a node's state reported or
// assigned, or its health changed.
type AutoEvent struct {
	At                          time.Time
	Node, Reported, Goal, About string
}

// Events are the monitor's events since since, oldest first.
func (f *AutoFailover) Events(since time.Time) []AutoEvent {
	f.t.Helper()
	var out []AutoEvent
	f.query(func(c *pgx.Conn) error {
		rows, err := c.Query(context.Background(), `
			SELECT eventtime, nodename, reportedstate::text, goalstate::text, description
			  FROM pgautofailover.event WHERE eventtime >= $1 ORDER BY eventid`, since)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e AutoEvent
			if err := rows.Scan(&e.At, &e.Node, &e.Reported, &e.Goal, &e.About); err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	return out
}

// CopyLogs copies the keepers' logs (the monitor's too) and their
// PostgreSQL logs into the folder to, as NAME-keeper.log and
// NAME-postgresql-*.log, for a run that keeps its logs.
func (f *AutoFailover) CopyLogs(to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	nodes, err := os.ReadDir(f.dir)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if !n.IsDir() || n.Name() == "sock" {
			continue
		}
		files := map[string]string{filepath.Join(f.dir, n.Name(), "keeper.log"): n.Name() + "-keeper.log"}
		pgLogs, _ := filepath.Glob(filepath.Join(f.dir, n.Name(), "pg", "log", "*"))
		for _, l := range pgLogs {
			files[l] = n.Name() + "-" + filepath.Base(l)
		}
		for from, name := range files {
			b, err := os.ReadFile(from)
			if err != nil {
				continue // a node that never started has no log
			}
			if err := os.WriteFile(filepath.Join(to, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *AutoFailover) query(fn func(*pgx.Conn) error) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, f.Monitor)
	if err != nil {
		f.t.Fatalf("dbtest: connect to the pg_auto_failover monitor: %v", err)
	}
	defer c.Close(context.Background())
	if err := fn(c); err != nil {
		f.t.Fatalf("dbtest: on the pg_auto_failover monitor: %v", err)
	}
}

func (f *AutoFailover) script(args ...string) string {
	f.t.Helper()
	return runScript(f.t, f.env, "autofailover.sh", args...)
}

func lastLine(out string) string {
	lines := strings.Split(out, "\n")
	return lines[len(lines)-1]
}
