package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// One round of what the failover harness does many times: a synchronous
// standby, the primary killed, the standby promoted, the old primary
// rewound into a standby of the new one and the roles failed back, with
// a multi-host URL following the primary and every committed row kept.
func TestStandbyFailoverAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three PostgreSQL servers")
	}
	a := StartReplicatedServer(t)
	_, runtime := a.Roles()
	execSQL(t, a.URL, "CREATE TABLE kept (n int PRIMARY KEY); GRANT SELECT, INSERT ON kept TO "+RuntimeRole)
	b := a.StartStandby(StandbyOptions{Name: "b"})
	late := a.StartStandby(StandbyOptions{Name: "late", ApplyDelay: 3 * time.Second})
	a.SetSynchronous("remote_apply", "b")
	a.WaitStreaming("b", true)
	if a.InRecovery() || !b.InRecovery() {
		t.Fatal("a should be the primary and b its standby")
	}

	// remote_apply: a commit acknowledged by a is visible on b at once;
	// the late standby shows it only after its delay.
	url := MultiHostURL(runtime, a, b)
	execSQL(t, url, "INSERT INTO kept VALUES (1)")
	requireRows(t, b.URL, 1, "b sees %d rows right after a remote_apply commit, want 1")
	requireRows(t, late.URL, 0, "the delayed standby sees %d rows at once, want 0")

	// Failover: a dies, b is promoted, the same URL now writes to b.
	a.Kill()
	b.Promote()
	execSQL(t, url, "INSERT INTO kept VALUES (2)")
	requireRows(t, b.URL, 2, "b has %d rows after failover, want 2")

	// The old primary comes back as b's synchronous standby, then the
	// roles swap back.
	requireRewound(t, "a", a, b)
	if a.Name != "pg"+a.Port() {
		t.Fatalf("a rebuilt under name %q", a.Name)
	}
	b.SetSynchronous("remote_apply", a.Name)
	b.WaitStreaming(a.Name, true)
	execSQL(t, url, "INSERT INTO kept VALUES (3)")
	b.Kill()
	a.Promote()
	execSQL(t, url, "INSERT INTO kept VALUES (4)")
	requireRows(t, a.URL, 4, "a has %d rows after failing back, want 4")
	requireRewound(t, "b", b, a)
	a.SetSynchronous("remote_apply", "b")
	a.WaitStreaming("b", true)
	requireRows(t, b.URL, 4, "b rebuilt has %d rows, want 4")
}

// requireRows stops the test unless kept has want rows on the server at
// url; format says what was wrong, with a %d for the rows found.
func requireRows(t *testing.T, url string, want int, format string) {
	t.Helper()
	if n := count(t, url); n != want {
		t.Fatalf(format, n)
	}
}

// requireRewound rebuilds the server called name as a standby of primary
// and flags the test unless it was rewound with pg_rewind.
func requireRewound(t *testing.T, name string, s, primary *PrivateServer) {
	t.Helper()
	if how := s.RebuildAsStandby(primary); how != "pg_rewind" {
		t.Errorf("%s rebuilt with %s, want pg_rewind", name, how)
	}
}

// withConn connects to url, giving the connection and fn 30 seconds, and
// runs fn on it.
func withConn(t *testing.T, url string, fn func(ctx context.Context, c *pgx.Conn)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	fn(ctx, c)
}

func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	withConn(t, url, func(ctx context.Context, c *pgx.Conn) {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	})
}

func count(t *testing.T, url string) int {
	t.Helper()
	var n int
	withConn(t, url, func(ctx context.Context, c *pgx.Conn) {
		if err := c.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
	})
	return n
}
