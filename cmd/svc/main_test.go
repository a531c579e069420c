package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// run executes svc with args and returns its standard output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return execute(t, nil, args...)
}

// runIn is run with in as standard input.
func runIn(t *testing.T, in string, args ...string) (string, error) {
	t.Helper()
	return execute(t, strings.NewReader(in), args...)
}

// execute runs svc with args, and in as its standard input unless nil,
// and returns what it wrote (standard output and error together).
func execute(t *testing.T, in io.Reader, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	if in != nil {
		cmd.SetIn(in)
	}
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestAdminKeysAndAssets(t *testing.T) {
	u := dbtest.NewURL(t)
	t.Setenv("DATABASE_URL", u)
	t.Setenv("MIGRATE_DATABASE_URL", dbtest.OwnerURL(u))
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")

	// A function of the schema without its search path (River's, as a
	// later River migration could leave it) is pinned again by migrate.
	owner, err := db.Open(context.Background(), dbtest.OwnerURL(u), 1)
	require.NoError(t, err)
	_, err = owner.Pool.Exec(context.Background(), "ALTER FUNCTION river_job_state_in_bitmask(bit, river_job_state) RESET search_path")
	owner.Close()
	require.NoError(t, err)

	// As the owner, granting the runtime role; again, the same.
	for i := range 2 {
		out, err := run(t, "migrate")
		require.NoError(t, err, out)
		require.Contains(t, out, "grants applied to the runtime role "+dbtest.RuntimeRole)
		if i == 0 {
			require.Contains(t, out, "search path pinned on 1 function\n")
		} else {
			require.NotContains(t, out, "search path pinned")
		}
	}
	out, err := run(t, "migrate")
	require.NoError(t, err, out)
	d, err := db.Open(context.Background(), u, 2)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ada := operatorKeys(t, d, operatortest.Member{Name: "ada", Role: operator.Admin})["ada"]

	out, err = run(t, "admin", "keys", "mint", "--scope", "readwrite", "--label", "backend", "--key", ada)
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	key := lines[len(lines)-1]
	require.Regexp(t, `^svc_test_[A-Za-z0-9_-]{43}$`, key, "the key alone on the last line")

	out, err = run(t, "admin", "keys", "list")
	require.NoError(t, err)
	require.Contains(t, out, "backend")
	require.NotContains(t, out, key[9:], "list never shows a secret")
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	require.True(t, strings.HasPrefix(id, "key_"), out)

	out, err = run(t, "admin", "keys", "revoke", id, "--key", ada)
	require.NoError(t, err, out)
	require.Contains(t, out, "revoked "+id)
	_, err = run(t, "admin", "keys", "revoke", "key_nope", "--key", ada)
	require.Error(t, err)

	_, err = run(t, "admin", "keys", "mint", "--scope", "root", "--label", "x", "--key", ada)
	require.ErrorContains(t, err, "--scope")

	out, err = run(t, "admin", "assets", "set", "BTC", "--withdrawal-min", "20000", "--withdrawal-flat-fee", "150", "--key", ada)
	require.NoError(t, err, out)
	require.Contains(t, out, "min 0.00020000")
	_, err = run(t, "admin", "assets", "set", "BTC", "--withdrawal-min", "0.0002", "--key", ada)
	require.ErrorContains(t, err, "smallest units")
	_, err = run(t, "admin", "assets", "set", "DOGE", "--withdrawal-min", "1", "--key", ada)
	require.ErrorContains(t, err, "unknown asset")
	out, err = run(t, "admin", "assets", "list")
	require.NoError(t, err)
	require.Contains(t, out, "0.00000150")
}

func TestBadConfigNamesTheSetting(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@127.0.0.1:1/x")
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("PORT", "not-a-port")
	_, err := run(t, "api")
	require.ErrorContains(t, err, "PORT")
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	require.NoError(t, err)
	require.Equal(t, "svc "+version+"\n", out)
}

// adminDB points svc at a fresh migrated database and returns a
// connection to it, for the test to arrange what the commands then see.
func adminDB(t *testing.T) *db.DB {
	t.Helper()
	dbURL := dbtest.NewURL(t)
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("MIGRATE_DATABASE_URL", dbtest.OwnerURL(dbURL))
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	d, err := db.Open(context.Background(), dbURL, 2)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// migratedDB is adminDB once svc migrate has run on it.
func migratedDB(t *testing.T) *db.DB {
	t.Helper()
	d := adminDB(t)
	out, err := run(t, "migrate")
	require.NoError(t, err, out)
	return d
}

// creditAlice credits units of BTC to alice, as the deposit payment n.
func creditAlice(t *testing.T, d *db.DB, units int64, n int) {
	t.Helper()
	_, err := ledger.CreditDeposit(context.Background(), d.Bun, "BTC", ledger.UserHolder("alice"), units, fmt.Sprintf("deposit:test:payment:%d", n), "test")
	require.NoError(t, err)
}

func TestAdminLedgerCheck(t *testing.T) {
	super := dbtest.AdminURL(t) // before adminDB points DATABASE_URL at the runtime role
	d := adminDB(t)
	creditAlice(t, d, 150000, 1)

	out, err := run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)
	require.Contains(t, out, "covered: full: every entry and posting")

	// Incremental: it continues the consistent check just recorded.
	creditAlice(t, d, 1000, 2)
	out, err = run(t, "admin", "ledger", "check", "--incremental")
	require.NoError(t, err, out)
	require.Contains(t, out, "covered: incremental: entries of transactions from")
	require.Contains(t, out, "ledger consistent")

	// Corrupt one materialized balance by hand, as an operator might fear
	// (only a superuser with the triggers off can: migration 0014).
	runtime := os.Getenv("DATABASE_URL")
	t.Setenv("DATABASE_URL", super) // ExecBehindTriggers connects as its user
	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, runtime,
		"UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = 'alice' AND kind = 'user_available'"))
	t.Setenv("DATABASE_URL", runtime)
	out, err = run(t, "admin", "ledger", "check")
	require.ErrorIs(t, err, errLedgerInconsistent)
	require.Contains(t, out, "alice", "the report names the drifted account")
	out, err = run(t, "admin", "ledger", "check", "--incremental")
	require.ErrorIs(t, err, errLedgerInconsistent)
	require.Contains(t, out, "covered: incremental")
	require.Contains(t, out, `BTC user_available of "alice"`, "the incremental check names it too")
}

func TestAdminAudit(t *testing.T) {
	d := adminDB(t)
	ctx := context.Background()

	out, err := run(t, "admin", "audit")
	require.NoError(t, err, out)
	require.Contains(t, out, "no audit entries")

	// Enrolling alice, bob (admins) and carol (an approver) is four
	// entries: alice's init, bob's enrollment, and carol's, which needs
	// both admins.
	keys := operatorKeys(t, d, operatortest.Member{Name: "alice", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Admin}, operatortest.Member{Name: "carol", Role: operator.Approver})
	out, err = run(t, "admin", "keys", "mint", "--scope", "admin", "--label", "ops", "--key", keys["alice"])
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	plain := lines[len(lines)-1]
	id := strings.Fields(lines[0])[1]
	require.True(t, strings.HasPrefix(id, "key_"), out)
	require.Contains(t, out, "by op:alice")
	out, err = run(t, "admin", "keys", "revoke", id, "--key", keys["bob"])
	require.NoError(t, err, out)
	out, err = run(t, "admin", "keys", "mint", "--scope", "readwrite", "--label", "backend", "--key", keys["alice"])
	require.NoError(t, err, out)

	// A dead event, redelivered from the command line.
	evID := uuid.New()
	_, err = d.Pool.Exec(ctx, `INSERT INTO outbound_events (id, type, status, attempts, next_attempt_at, payload, created_at, dead_at)
		VALUES ($1, 'deposit.expired', 'dead', 10, now(), '{}', now(), now())`, evID)
	require.NoError(t, err)
	out, err = run(t, "admin", "events", "redeliver", event.PublicID(evID), "--key", keys["carol"])
	require.NoError(t, err, out)

	out, err = run(t, "admin", "audit", "--json")
	require.NoError(t, err, out)
	require.NotContains(t, out, plain)
	var all audit.ListView
	require.NoError(t, json.Unmarshal([]byte(out), &all), out)
	require.Nil(t, all.NextCursor)
	type row struct{ actor, label, action, target string }
	var got []row
	for _, x := range all.Entries {
		got = append(got, row{x.Actor, x.ActorLabel, x.Action, x.Target})
	}
	require.Len(t, got, 8)
	require.Equal(t, []row{
		{"op:carol", "carol", audit.EventRedeliver, event.PublicID(evID)},
		{"op:alice", "alice", audit.KeyMint, all.Entries[1].Target},
		{"op:bob", "bob", audit.KeyRevoke, id},
		{"op:alice", "alice", audit.KeyMint, id},
	}, got[:4], "newest first")
	require.Equal(t, row{"op:alice", "alice", operator.ActionInit, "alice"}, got[7])

	// Page by page with the cursor.
	out, err = run(t, "admin", "audit", "--json", "--limit", "5")
	require.NoError(t, err, out)
	var first audit.ListView
	require.NoError(t, json.Unmarshal([]byte(out), &first))
	require.Len(t, first.Entries, 5)
	require.NotNil(t, first.NextCursor)
	out, err = run(t, "admin", "audit", "--json", "--limit", "5", "--cursor", fmt.Sprint(*first.NextCursor))
	require.NoError(t, err, out)
	var second audit.ListView
	require.NoError(t, json.Unmarshal([]byte(out), &second))
	require.Len(t, second.Entries, 3)
	require.Equal(t, all.Entries[7].ID, second.Entries[2].ID)
	require.Nil(t, second.NextCursor)

	out, err = run(t, "admin", "audit", "--action", "apikey.revoke")
	require.NoError(t, err, out)
	require.Contains(t, out, "ACTION")
	require.Contains(t, out, "op:bob")
	require.NotContains(t, out, "op:alice")
	out, err = run(t, "admin", "audit", "--target", id, "--limit", "1")
	require.NoError(t, err, out)
	require.Contains(t, out, "more: --cursor ")

	_, err = run(t, "admin", "audit", "--limit", "0")
	require.ErrorContains(t, err, "--limit")
	_, err = run(t, "admin", "audit", "--cursor", "0")
	require.ErrorContains(t, err, "--cursor")
}

// TestServeRefusesAnUnmigratedDatabase: svc api and svc worker on a
// database svc migrate never ran say so and exit, instead of answering
// /healthz ok and 500 on every call.
func TestServeRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", dbtest.NewEmptyURL(t))
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	for _, name := range []string{"api", "worker"} {
		// Bounded: without the check the command would serve until stopped.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{name})
		err := cmd.ExecuteContext(ctx)
		cancel()
		require.ErrorContains(t, err, "the database is not migrated", name)
		require.ErrorContains(t, err, "run `svc migrate`", name)
	}
}

// TestProductionRefusesAnUnsafeRole: in production svc api and svc worker
// refuse to start as a role that could switch the ledger's guards off (the
// schema owner here), saying how to fix it.
func TestProductionRefusesAnUnsafeRole(t *testing.T) {
	u := dbtest.NewURL(t)
	for k, v := range map[string]string{
		"DATABASE_URL": dbtest.OwnerURL(u), "BITCOIN_NETWORK": "regtest", "LOG_LEVEL": "error",
		"SVC_ENV": "production", "API_KEY_MODE": "live",
		"BTCPAY_URL": "https://btcpay.example", "BTCPAY_API_KEY": "a-real-api-key", "BTCPAY_STORE_ID": "s",
		"PROCESSOR_WEBHOOK_SECRET": "0123456789abcdef-ingress", "TRONGRID_URL": "https://api.trongrid.io",
		"PLATFORM_WEBHOOK_URL": "https://platform.example/hooks", "PLATFORM_WEBHOOK_SECRET": "0123456789abcdef-platform",
		"PORT": "18089", // never bound: the refusal comes first
	} {
		t.Setenv(k, v)
	}
	for _, cmd := range []string{"api", "worker"} {
		out, err := run(t, cmd)
		require.Error(t, err, out)
		require.ErrorContains(t, err, "unsafe database role")
		require.ErrorContains(t, err, "owns the ledger's tables")
		require.ErrorContains(t, err, "MIGRATE_DATABASE_URL")
	}
}
