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
	if n := count(t, b.URL); n != 1 {
		t.Fatalf("b sees %d rows right after a remote_apply commit, want 1", n)
	}
	if n := count(t, late.URL); n != 0 {
		t.Fatalf("the delayed standby sees %d rows at once, want 0", n)
	}

	// Failover: a dies, b is promoted, the same URL now writes to b.
	a.Kill()
	b.Promote()
	execSQL(t, url, "INSERT INTO kept VALUES (2)")
	if n := count(t, b.URL); n != 2 {
		t.Fatalf("b has %d rows after failover, want 2", n)
	}

	// The old primary comes back as b's synchronous standby, then the
	// roles swap back.
	if how := a.RebuildAsStandby(b); how != "pg_rewind" {
		t.Errorf("a rebuilt with %s, want pg_rewind", how)
	}
	if a.Name != "pg"+a.Port() {
		t.Fatalf("a rebuilt under name %q", a.Name)
	}
	b.SetSynchronous("remote_apply", a.Name)
	b.WaitStreaming(a.Name, true)
	execSQL(t, url, "INSERT INTO kept VALUES (3)")
	b.Kill()
	a.Promote()
	execSQL(t, url, "INSERT INTO kept VALUES (4)")
	if n := count(t, a.URL); n != 4 {
		t.Fatalf("a has %d rows after failing back, want 4", n)
	}
	if how := b.RebuildAsStandby(a); how != "pg_rewind" {
		t.Errorf("b rebuilt with %s, want pg_rewind", how)
	}
	a.SetSynchronous("remote_apply", "b")
	a.WaitStreaming("b", true)
	if n := count(t, b.URL); n != 4 {
		t.Fatalf("b rebuilt has %d rows, want 4", n)
	}
}

func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}
