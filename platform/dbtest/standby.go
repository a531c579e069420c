package dbtest

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replication: a private primary and streaming standbys of it, built with
// the installed binaries (pg_basebackup -R, standby.signal, pg_ctl
// promote, pg_rewind) through scripts/db.sh, for the tests of failover and
// of reads from a replica. Roles and databases replicate: create them
// (Roles) on the primary only.

// StartReplicatedServer starts a private server set up to be a
// replication primary (wal_log_hints for pg_rewind, WAL kept for standbys
// that fall behind). Until SetSynchronous says otherwise, its standbys
// are asynchronous.
func StartReplicatedServer(t testing.TB) *PrivateServer {
	t.Helper()
	s := newPrivate(t)
	s.env = append(s.env, "SVC_PG_REPLICATION=1")
	out := s.run()
	lines := strings.Split(out, "\n")
	s.URL = lines[len(lines)-1]
	t.Cleanup(func() { s.run("stop") })
	return s
}

// StandbyOptions are a standby's settings.
type StandbyOptions struct {
	// Name is the standby's application_name, the name the primary's
	// synchronous_standby_names and pg_stat_replication know it by.
	// Required.
	Name string
	// ApplyDelay is recovery_min_apply_delay: the standby replays each
	// commit this long after the primary made it (a replica late on
	// purpose). Zero: at once.
	ApplyDelay time.Duration
}

// StartStandby takes a base backup of s (pg_basebackup -R) into a new
// private server and starts it as a streaming hot standby of s. The
// standby's URL names the same svc database, read-only until promoted.
func (s *PrivateServer) StartStandby(o StandbyOptions) *PrivateServer {
	s.t.Helper()
	if o.Name == "" {
		s.t.Fatal("dbtest: StartStandby needs a Name")
	}
	sb := newPrivate(s.t)
	sb.Name = o.Name
	sb.delay = o.ApplyDelay
	out := sb.run("standby", s.Port(), o.Name, delaySetting(o.ApplyDelay))
	lines := strings.Split(out, "\n")
	sb.URL = lines[len(lines)-1]
	s.t.Cleanup(func() { sb.run("stop") })
	return sb
}

// Promote makes the standby s a primary (pg_ctl promote) and waits until
// it accepts writes.
func (s *PrivateServer) Promote() {
	s.t.Helper()
	s.run("promote")
	deadline := time.Now().Add(60 * time.Second)
	for s.InRecovery() {
		if time.Now().After(deadline) {
			s.t.Fatalf("dbtest: %s still in recovery 60s after pg_ctl promote", s.Port())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL to the server's postmaster, as the loss of its host
// would, and returns once its other processes have noticed and exited:
// clients see their connections drop and nothing answers on the port.
// RebuildAsStandby or Start bring it back.
func (s *PrivateServer) Kill() { s.t.Helper(); s.run("kill") }

// RebuildAsStandby turns the stopped or killed server s into a streaming
// standby of primary, keeping its name, port and apply delay: pg_rewind
// from primary, or a new base backup when that fails (a server that never
// diverged, or one pg_rewind cannot read), then starts it. It returns
// which of the two it was: "pg_rewind" or "pg_basebackup".
func (s *PrivateServer) RebuildAsStandby(primary *PrivateServer) string {
	s.t.Helper()
	if s.Name == "" {
		s.Name = "pg" + s.Port()
	}
	lines := strings.Split(s.run("rebuild", primary.Port(), s.Name, delaySetting(s.delay)), "\n")
	if len(lines) < 2 {
		s.t.Fatalf("scripts/db.sh rebuild: expected the method and the URL, got %q", lines)
	}
	return lines[len(lines)-2]
}

// Port is the server's TCP port on 127.0.0.1.
func (s *PrivateServer) Port() string {
	for _, kv := range s.env {
		if p, ok := strings.CutPrefix(kv, "SVC_PG_PORT="); ok {
			return p
		}
	}
	s.t.Fatal("dbtest: private server without a port")
	return ""
}

// InRecovery reports whether the server is a standby (pg_is_in_recovery).
func (s *PrivateServer) InRecovery() bool {
	s.t.Helper()
	var r bool
	s.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), "SELECT pg_is_in_recovery()").Scan(&r)
	})
	return r
}

// AcceptsWrites reports whether a new session on the server may write:
// it is not in recovery and transaction_read_only is off, what a client
// with target_session_attrs=read-write checks. (pg_auto_failover promotes
// a standby read-only and allows writes only once the monitor gives up on
// the old primary.)
func (s *PrivateServer) AcceptsWrites() bool {
	s.t.Helper()
	var r bool
	s.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'").Scan(&r)
	})
	return r
}

// SetSynchronous sets the primary's synchronous_commit (on, remote_write,
// remote_apply, local, off) and synchronous_standby_names (a standby's
// Name, a list or '*'; empty: no synchronous standby, commits return
// without waiting for any) with ALTER SYSTEM, and reloads.
// Commits wait, without limit, for a named standby that is not there.
func (s *PrivateServer) SetSynchronous(commit, standbyNames string) {
	s.t.Helper()
	s.query(func(c *pgx.Conn) error {
		ctx := context.Background()
		for _, q := range []string{
			"ALTER SYSTEM SET synchronous_commit = " + quoteLiteral(commit),
			"ALTER SYSTEM SET synchronous_standby_names = " + quoteLiteral(standbyNames),
			"SELECT pg_reload_conf()",
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// WaitStreaming waits until the standby named name streams from the
// primary s, synchronous when sync is true (sync_state sync, or quorum for
// a standby named in an ANY list, as pg_auto_failover names them), and has
// replayed everything s had written when WaitStreaming was called.
func (s *PrivateServer) WaitStreaming(name string, sync bool) {
	s.t.Helper()
	var target string
	s.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&target)
	})
	deadline := time.Now().Add(120 * time.Second)
	for {
		var ok bool
		s.query(func(c *pgx.Conn) error {
			err := c.QueryRow(context.Background(), `
				SELECT state = 'streaming' AND (NOT $2 OR sync_state IN ('sync', 'quorum'))
				       AND replay_lsn IS NOT NULL AND replay_lsn >= $3::pg_lsn
				  FROM pg_stat_replication WHERE application_name = $1`, name, sync, target).Scan(&ok)
			if err == pgx.ErrNoRows {
				return nil
			}
			return err
		})
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("dbtest: standby %s not streaming (sync %v) from %s after 120s", name, sync, s.Port())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MultiHostURL returns u (a URL of one of the servers, with its user,
// database and parameters) naming every server in servers as a host, in
// that order, with target_session_attrs=read-write: a client connects to
// whichever is the primary, as through a failover tool.
func MultiHostURL(u string, servers ...*PrivateServer) string {
	return multiHost(u, "read-write", servers...)
}

func multiHost(u, attrs string, servers ...*PrivateServer) string {
	p, err := url.Parse(u)
	if err != nil || len(servers) == 0 {
		panic(fmt.Sprintf("dbtest: MultiHostURL(%q): %v", u, err))
	}
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = "127.0.0.1:" + s.Port()
	}
	p.Host = strings.Join(hosts, ",")
	q := p.Query()
	q.Set("target_session_attrs", attrs)
	p.RawQuery = q.Encode()
	return p.String()
}

// query runs f on a superuser connection to the server's postgres
// database.
func (s *PrivateServer) query(f func(*pgx.Conn) error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, "postgres://svc@127.0.0.1:"+s.Port()+"/postgres?sslmode=disable")
	if err != nil {
		s.t.Fatalf("dbtest: connect to %s: %v", s.Port(), err)
	}
	defer c.Close(context.Background())
	if err := f(c); err != nil {
		s.t.Fatalf("dbtest: on %s: %v", s.Port(), err)
	}
}

func delaySetting(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
