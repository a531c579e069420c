package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// run executes svc with args and returns its standard output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestAdminKeysAndAssets(t *testing.T) {
	t.Setenv("DATABASE_URL", dbtest.NewURL(t))
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")

	out, err := run(t, "migrate")
	require.NoError(t, err, out)

	out, err = run(t, "admin", "keys", "mint", "--scope", "readwrite", "--label", "backend")
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

	out, err = run(t, "admin", "keys", "revoke", id)
	require.NoError(t, err, out)
	require.Contains(t, out, "revoked "+id)
	_, err = run(t, "admin", "keys", "revoke", "key_nope")
	require.Error(t, err)

	_, err = run(t, "admin", "keys", "mint", "--scope", "root", "--label", "x")
	require.ErrorContains(t, err, "--scope")

	out, err = run(t, "admin", "assets", "set", "BTC", "--withdrawal-min", "20000", "--withdrawal-flat-fee", "150")
	require.NoError(t, err, out)
	require.Contains(t, out, "min 0.00020000")
	_, err = run(t, "admin", "assets", "set", "BTC", "--withdrawal-min", "0.0002")
	require.ErrorContains(t, err, "smallest units")
	_, err = run(t, "admin", "assets", "set", "DOGE", "--withdrawal-min", "1")
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

func TestAdminLedgerCheck(t *testing.T) {
	dbURL := dbtest.NewURL(t)
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	ctx := context.Background()
	d, err := db.Open(ctx, dbURL, 2)
	require.NoError(t, err)
	defer d.Close()
	_, err = ledger.CreditDeposit(ctx, d.Bun, "BTC", "alice", 150000, "deposit:test:payment:1", "test")
	require.NoError(t, err)

	out, err := run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)

	// Corrupt one materialized balance by hand, as an operator might fear.
	var id int64
	require.NoError(t, d.Pool.QueryRow(ctx,
		"UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = 'alice' AND kind = 'user_available' RETURNING id").Scan(&id))
	out, err = run(t, "admin", "ledger", "check")
	require.ErrorIs(t, err, errLedgerInconsistent)
	require.Contains(t, out, "alice", "the report names the drifted account")
}
