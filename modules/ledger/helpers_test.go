package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// newDB returns a fresh migrated database with room for maxConns
// connections, connected as the runtime role.
func newDB(t testing.TB, maxConns int) *bun.DB {
	t.Helper()
	return newDBAs(t, maxConns, func(u string) string { return u })
}

// newDBAs returns a fresh migrated database connected as the role that
// as returns for its URL (dbtest.OwnerURL, or the admin for a test that
// writes with the triggers off).
func newDBAs(t testing.TB, maxConns int, as func(string) string) *bun.DB {
	t.Helper()
	d, err := db.Open(context.Background(), as(dbtest.NewURL(t)), maxConns)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d.Bun
}

// inTx runs fn in its own committed transaction.
func inTx(t testing.TB, d *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) error {
	t.Helper()
	return db.RunInTx(context.Background(), d, fn)
}

// fullCheck runs the full ledger check and requires that it ran.
func fullCheck(t testing.TB, d *bun.DB) ledger.Report {
	t.Helper()
	r, err := ledger.Check(context.Background(), d)
	require.NoError(t, err)
	return r
}

// behindTriggers runs fn in its own committed transaction with the
// triggers off (session_replication_role replica: a superuser's way
// around them), and requires that it committed.
func behindTriggers(t testing.TB, d *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) {
	t.Helper()
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		return fn(ctx, tx)
	}))
}

func credit(t testing.TB, d *bun.DB, asset, user string, amount int64, ref string) ledger.Posted {
	t.Helper()
	var p ledger.Posted
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		var err error
		p, err = ledger.CreditDeposit(ctx, tx, asset, ledger.UserHolder(user), amount, ref, "")
		return err
	}))
	return p
}

func hold(t testing.TB, d *bun.DB, asset, user string, amount int64, ref string) (ledger.Posted, error) {
	t.Helper()
	var p ledger.Posted
	err := inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		var err error
		p, err = ledger.PlaceHold(ctx, tx, asset, ledger.UserHolder(user), amount, ref, "")
		return err
	})
	return p, err
}

// balance returns a user's materialized available and held in one asset.
func balance(t testing.TB, d *bun.DB, asset, user string) (avail, held int64) {
	t.Helper()
	require.NoError(t, d.NewRaw(`SELECT
  coalesce((SELECT balance FROM ledger_accounts WHERE owner = ? AND asset = ? AND kind = 'user_available'), 0),
  coalesce((SELECT balance FROM ledger_accounts WHERE owner = ? AND asset = ? AND kind = 'user_hold'), 0)`,
		user, asset, user, asset).Scan(context.Background(), &avail, &held))
	return avail, held
}

// totals returns the per-asset totals keyed by asset.
func totals(t testing.TB, d *bun.DB) map[string]ledger.Totals {
	t.Helper()
	list, err := ledger.AssetTotals(context.Background(), d)
	require.NoError(t, err)
	out := map[string]ledger.Totals{}
	for _, x := range list {
		out[x.Asset] = x
	}
	return out
}

func count(t testing.TB, d *bun.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, d.NewRaw(query, args...).Scan(context.Background(), &n))
	return n
}

// requireInvariants checks the money invariants straight from the tables
// and through ledger.Check: every entry balanced with two or more postings,
// every materialized balance equal to its postings, no negative user
// balance, and the postings of each asset summing to zero.
func requireInvariants(t testing.TB, d *bun.DB) {
	t.Helper()
	require.Zero(t, count(t, d, `SELECT count(*) FROM (
  SELECT e.id FROM ledger_entries e LEFT JOIN ledger_postings p ON p.entry_id = e.id
   GROUP BY e.id HAVING count(p.id) < 2 OR coalesce(sum(p.amount), 0) <> 0) x`), "unbalanced entries")
	require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_accounts a
  WHERE a.balance IS NOT NULL AND a.balance <> (SELECT coalesce(sum(amount), 0) FROM ledger_postings WHERE account_id = a.id)`),
		"materialized balances that differ from their postings")
	require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_accounts WHERE balance < 0`), "negative balances")
	require.Zero(t, count(t, d, `SELECT count(*) FROM (
  SELECT a.asset FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
   GROUP BY a.asset HAVING sum(p.amount) <> 0) x`), "assets whose postings do not sum to zero")
	r, err := ledger.Check(context.Background(), d)
	require.NoError(t, err)
	require.True(t, r.LedgerConsistent, "check: %+v", r)
}
