package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// checkAboveAll runs full checks until one's boundary is above every
// committed entry's transaction, and returns it. Other databases of the
// shared test server hold transactions too, and a boundary is the oldest
// transaction running anywhere on the server.
func checkAboveAll(t testing.TB, d *bun.DB) ledger.Report {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := ledger.Check(context.Background(), d)
		require.NoError(t, err)
		require.True(t, r.LedgerConsistent, "%+v", r)
		require.Equal(t, ledger.ScopeFull, r.Coverage.Scope)
		require.NotNil(t, r.Coverage.CheckID)
		if count(t, d, `SELECT count(*) FROM ledger_entries WHERE created_xact >= ?::text::xid8`, fmt.Sprint(r.Coverage.ToXid)) == 0 {
			return r
		}
		require.True(t, time.Now().Before(deadline), "no check's boundary above every entry after 2 minutes")
		time.Sleep(20 * time.Millisecond)
	}
}

func checkIncremental(t testing.TB, d *bun.DB) ledger.Report {
	t.Helper()
	r, err := ledger.CheckIncremental(context.Background(), d)
	require.NoError(t, err)
	require.NotNil(t, r.Coverage.CheckID, "recorded")
	return r
}

// recorded reads a check's row: its scope, whether it was consistent,
// and what it continued.
func recorded(t testing.TB, d *bun.DB, id int64) (scope string, consistent bool, since *int64) {
	t.Helper()
	require.NoError(t, d.NewRaw(`SELECT scope, consistent, since_check FROM ledger_checks WHERE id = ?`, id).
		Scan(context.Background(), &scope, &consistent, &since))
	return scope, consistent, since
}

// TestIncrementalCheckCoversOnlyNewEntries: with no check recorded the
// incremental check is the full one; after a full check it reads only the
// entries committed since, and after one that found nothing new it reads
// nothing but the accounts.
func TestIncrementalCheckCoversOnlyNewEntries(t *testing.T) {
	t.Parallel()
	_, d := newCheckpointDB(t)
	credit(t, d, "BTC", "ann", 1_000, "old-1")
	credit(t, d, "BTC", "bert", 500, "old-2")

	first := checkIncremental(t, d)
	require.Equal(t, ledger.ScopeFull, first.Coverage.Scope, "nothing recorded before: full")
	require.True(t, first.LedgerConsistent)
	require.Equal(t, int64(2), first.Entries)
	require.Equal(t, int64(4), first.Postings)

	full := checkAboveAll(t, d)
	var ids []int64
	for i := range 3 {
		ids = append(ids, credit(t, d, "BTC", "ann", int64(10+i), fmt.Sprintf("new-%d", i)).ID)
	}
	_, err := hold(t, d, "BTC", "bert", 100, "wd-1")
	require.NoError(t, err)
	ids = append(ids, count(t, d, `SELECT id FROM ledger_entries WHERE source_ref = 'wd-1'`))

	r := checkIncremental(t, d)
	require.True(t, r.LedgerConsistent, "%+v", r)
	c := r.Coverage
	require.Equal(t, ledger.ScopeIncremental, c.Scope)
	require.Equal(t, *full.Coverage.CheckID, *c.SinceCheck)
	require.NotNil(t, c.SinceCheckedAt)
	require.Equal(t, full.Coverage.ToXid, c.FromXid)
	require.GreaterOrEqual(t, c.ToXid, c.FromXid)
	require.Equal(t, int64(len(ids)), r.Entries, "only the entries since the full check")
	require.Equal(t, int64(2*len(ids)), r.Postings)
	require.Equal(t, ids[0], *c.FirstEntry)
	require.Equal(t, ids[len(ids)-1], *c.LastEntry)
	require.Equal(t, int64(3), r.Accounts, "the accounts written since: ann's, and bert's available and held")
	require.Contains(t, c.String(), fmt.Sprintf("incremental: entries of transactions from %d on (ids %d to %d), since check %d",
		c.FromXid, ids[0], ids[len(ids)-1], *full.Coverage.CheckID))
	scope, consistent, since := recorded(t, d, *c.CheckID)
	require.Equal(t, ledger.ScopeIncremental, scope)
	require.True(t, consistent)
	require.Equal(t, *full.Coverage.CheckID, *since)

	// Nothing new after a boundary above every entry: nothing read but
	// the accounts.
	deadline := time.Now().Add(2 * time.Minute)
	for count(t, d, `SELECT count(*) FROM ledger_entries WHERE created_xact >= ?::text::xid8`, fmt.Sprint(r.Coverage.ToXid)) > 0 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(20 * time.Millisecond)
		r = checkIncremental(t, d)
		require.True(t, r.LedgerConsistent)
	}
	last := checkIncremental(t, d)
	require.True(t, last.LedgerConsistent)
	require.Equal(t, *r.Coverage.CheckID, *last.Coverage.SinceCheck)
	require.Zero(t, last.Entries)
	require.Zero(t, last.Postings)
	require.Zero(t, last.Accounts, "no account was written since")
	require.Nil(t, last.Coverage.FirstEntry)
	require.Equal(t, assetTotals(t, d), last.Totals, "the system sums carried from check to check")

	// The full check is still the full check.
	again := fullCheck(t, d)
	require.Equal(t, ledger.ScopeFull, again.Coverage.Scope)
	require.Equal(t, count(t, d, `SELECT count(*) FROM ledger_entries`), again.Entries)
}

// TestIncrementalCheckFindsDrift corrupts, as the owner with the triggers
// off, what was written after the last check's boundary, one way per
// case. The incremental check names it, does not move the boundary (the
// next run reads the same range again and finds it again), and the full
// check finds it too.
func TestIncrementalCheckFindsDrift(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// tamper corrupts the ledger after the boundary; new is the entry
		// posted after it.
		tamper     func(t *testing.T, u string, d *bun.DB, new ledger.Posted)
		drifts     []string
		unbalanced []string
		negative   []string
	}{
		{"UnbalancedNewEntry", func(t *testing.T, u string, _ *bun.DB, _ ledger.Posted) {
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `WITH e AS (
  INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', 'forged') RETURNING id)
INSERT INTO ledger_postings (entry_id, account_id, amount)
SELECT e.id, a.id, -5 FROM e, ledger_accounts a WHERE a.asset = 'BTC' AND a.kind = 'custody'`))
		}, nil, []string{"(correction forged, BTC): 1 postings sum to -0.00000005"}, nil},
		{"BrokenChain", func(t *testing.T, u string, _ *bun.DB, p ledger.Posted) {
			// The new posting's running balance and the balance both one
			// more: the balance matches its newest posting, but that posting
			// does not continue the chain.
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `UPDATE ledger_postings SET balance_after = balance_after + 1
 WHERE entry_id = $1 AND balance_after IS NOT NULL`, p.ID))
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `UPDATE ledger_accounts SET balance = balance + 1
 WHERE owner = 'cleo' AND asset = 'BTC' AND kind = 'user_available'`))
		}, []string{`BTC user_available of "cleo"`, "of 0.00000010 left 0.00001011, but posting"}, nil, nil},
		{"BalanceNotItsNewestPosting", func(t *testing.T, u string, _ *bun.DB, _ ledger.Posted) {
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `UPDATE ledger_accounts SET balance = balance + 7
 WHERE owner = 'dora' AND asset = 'BTC' AND kind = 'user_available'`))
		}, []string{`BTC user_available of "dora"`, "materialized 0.00000507, its newest posting"}, nil, nil},
		{"NegativeUserBalance", func(t *testing.T, u string, _ *bun.DB, _ ledger.Posted) {
			// A balanced entry whose user posting continues the chain below
			// zero (the balance itself cannot go below zero: a CHECK, which
			// the triggers being off does not lift).
			require.Equal(t, int64(2), dbtest.ExecBehindTriggers(t, u, `WITH e AS (
  INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', 'overdraw') RETURNING id, kind, source_ref, memo, created_at),
u AS (SELECT a.id, a.balance FROM ledger_accounts a WHERE owner = 'dora' AND asset = 'BTC' AND kind = 'user_available')
INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
SELECT e.id, u.id, -600, u.balance - 600, e.kind, e.source_ref, e.memo, e.created_at FROM e, u
 UNION ALL
SELECT e.id, a.id, 600, NULL, NULL, NULL, NULL, NULL FROM e, ledger_accounts a WHERE a.asset = 'BTC' AND a.kind = 'custody'`))
		}, []string{`BTC user_available of "dora"`}, nil, []string{`BTC user_available of "dora"`, "running balance of its newest posting -0.00000100"}},
		{"PostingAddedToACheckedEntry", func(t *testing.T, u string, d *bun.DB, _ ledger.Posted) {
			old := count(t, d, `SELECT id FROM ledger_entries WHERE source_ref = 'old-dora'`)
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `INSERT INTO ledger_postings (entry_id, account_id, amount)
SELECT $1, a.id, 3 FROM ledger_accounts a WHERE a.asset = 'BTC' AND a.kind = 'custody'`, old))
		}, nil, []string{"(deposit_credit old-dora, BTC): posting", "was added after check"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, d := newCheckpointDB(t)
			credit(t, d, "BTC", "cleo", 1_000, "old-cleo")
			credit(t, d, "BTC", "dora", 500, "old-dora")
			full := checkAboveAll(t, d)
			p := credit(t, d, "BTC", "cleo", 10, "new-cleo")

			tc.tamper(t, u, d, p)
			requireFindings := func(r ledger.Report) {
				t.Helper()
				require.False(t, r.LedgerConsistent)
				for _, l := range []struct {
					got, want []string
				}{{r.MaterializedVsDerivedDrifts, tc.drifts}, {r.UnbalancedEntries, tc.unbalanced}, {r.NegativeBalances, tc.negative}} {
					if l.want == nil {
						require.Empty(t, l.got)
						continue
					}
					require.Len(t, l.got, 1, "%q", l.got)
					for _, w := range l.want {
						require.Contains(t, l.got[0], w)
					}
				}
			}
			r := checkIncremental(t, d)
			require.Equal(t, ledger.ScopeIncremental, r.Coverage.Scope)
			require.Equal(t, *full.Coverage.CheckID, *r.Coverage.SinceCheck)
			requireFindings(r)
			_, consistent, _ := recorded(t, d, *r.Coverage.CheckID)
			require.False(t, consistent)

			// The boundary did not move: the next run continues the same
			// check and finds the same.
			again := checkIncremental(t, d)
			require.Equal(t, *full.Coverage.CheckID, *again.Coverage.SinceCheck)
			require.Equal(t, full.Coverage.ToXid, again.Coverage.FromXid)
			requireFindings(again)

			// The full check finds it as well (in its own words).
			all := fullCheck(t, d)
			require.False(t, all.LedgerConsistent)
			require.NotEmpty(t, append(append(all.MaterializedVsDerivedDrifts, all.UnbalancedEntries...), all.NegativeBalances...))
		})
	}
}

// TestIncrementalCheckWithConcurrentWriters: checks run while writers
// credit and hold, and while one transaction that wrote an entry stays
// open. No check finds anything, no recorded boundary passes the open
// transaction, and once it commits the next check reads its entry.
func TestIncrementalCheckWithConcurrentWriters(t *testing.T) {
	t.Parallel()
	_, d := newCheckpointDB(t)
	ctx := context.Background()
	credit(t, d, "BTC", "late", 1_000, "early")
	checkAboveAll(t, d)

	tx, err := d.BeginTx(ctx, nil)
	require.NoError(t, err)
	// Ended whatever happens: left open by a failure, it would hold the
	// server's oldest snapshot back, and every other test waiting for a
	// check's or a checkpoint's boundary would wait for it until the
	// package's timeout.
	t.Cleanup(func() { _ = tx.Rollback() })
	late, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder("late"), 7, "late", "")
	require.NoError(t, err)
	var lateXact string
	require.NoError(t, tx.NewRaw(`SELECT pg_current_xact_id()::text`).Scan(ctx, &lateXact))

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		written atomic.Int64
	)
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // the writers end before the pool closes
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("writer-%d", w)
			for i := 0; !stop.Load(); i++ {
				err := db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
					if _, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder(user), 100, fmt.Sprintf("%s-%d", user, i), ""); err != nil {
						return err
					}
					if i%3 == 0 {
						if _, err := ledger.PlaceHold(ctx, tx, "BTC", ledger.UserHolder(user), 50, fmt.Sprintf("%s-wd-%d", user, i), ""); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				written.Add(1)
			}
		}()
	}
	var boundaries []uint64
	for range 10 {
		r := checkIncremental(t, d)
		require.True(t, r.LedgerConsistent, "%+v", r)
		boundaries = append(boundaries, r.Coverage.ToXid)
	}
	stop.Store(true)
	wg.Wait()
	require.Positive(t, written.Load())
	for _, b := range boundaries {
		require.LessOrEqual(t, b, mustUint(t, lateXact), "a boundary passed a transaction still open")
	}
	require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_checks WHERE xid_to > ?::text::xid8`, lateXact),
		"no recorded boundary above the open transaction")

	require.NoError(t, tx.Commit())
	r := checkIncremental(t, d)
	require.True(t, r.LedgerConsistent, "%+v", r)
	require.LessOrEqual(t, r.Coverage.FromXid, mustUint(t, lateXact), "the late entry is in the range read")
	require.LessOrEqual(t, *r.Coverage.FirstEntry, late.ID)
	// The system accounts' sums, carried through every check while the
	// late entry's transaction stayed open across their boundaries, are
	// still those of their postings: nothing counted twice or lost.
	require.Equal(t, assetTotals(t, d), r.Totals)
	requireInvariants(t, d)
}

// TestIncrementalTotalsAfterACheckWithoutSums: a consistent check
// recorded before the system sums were (system_sums NULL) is continued,
// with the system accounts summed in full once; the check after that
// carries the sums again.
func TestIncrementalTotalsAfterACheckWithoutSums(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	ctx := context.Background()
	credit(t, d, "BTC", "old", 1_000, "before")
	_, err := hold(t, d, "BTC", "old", 300, "before-wd")
	require.NoError(t, err)
	checkAboveAll(t, d)
	// A check as recorded before migration 0024, at a boundary above
	// every entry so far (by the owner: the runtime role may not).
	_, err = ownerDB(t, u).ExecContext(ctx, `INSERT INTO ledger_checks (checked_at, scope, xid_to, last_posting, consistent, accounts, entries, postings, findings, took_ms)
SELECT now(), 'full', pg_snapshot_xmin(pg_current_snapshot()), (SELECT max(id) FROM ledger_postings), true, 0, 0, 0, 0, 0`)
	require.NoError(t, err)
	legacy := count(t, d, `SELECT max(id) FROM ledger_checks`)
	credit(t, d, "BTC", "new", 70, "after")
	credit(t, d, "USDT_TRC20", "new", 5_000_000, "after-usdt")

	r := checkIncremental(t, d)
	require.True(t, r.LedgerConsistent, "%+v", r)
	require.Equal(t, legacy, *r.Coverage.SinceCheck)
	require.Equal(t, assetTotals(t, d), r.Totals)
	var sums *string
	require.NoError(t, d.QueryRowContext(ctx, `SELECT system_sums::text FROM ledger_checks WHERE id = ?`, *r.Coverage.CheckID).Scan(&sums))
	require.NotNil(t, sums, "recorded for the next check")

	credit(t, d, "BTC", "new", 30, "later")
	next := checkIncremental(t, d)
	require.True(t, next.LedgerConsistent, "%+v", next)
	require.Equal(t, assetTotals(t, d), next.Totals)
}

// TestChecksAreAppendOnly: the runtime role may not change or delete a
// recorded check, and the owner is refused by the triggers.
func TestChecksAreAppendOnly(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	credit(t, d, "BTC", "gil", 1_000, "pay")
	checkIncremental(t, d)
	owner, err := db.Open(context.Background(), dbtest.OwnerURL(u), 2)
	require.NoError(t, err)
	defer owner.Close()
	for _, stmt := range []string{
		`UPDATE ledger_checks SET consistent = true`,
		`DELETE FROM ledger_checks`,
		`TRUNCATE ledger_checks`,
	} {
		_, err := d.ExecContext(context.Background(), stmt)
		require.ErrorContains(t, err, "permission denied", "runtime role: %s", stmt)
		_, err = owner.Bun.ExecContext(context.Background(), stmt)
		require.ErrorContains(t, err, "append-only", "owner: %s", stmt)
	}
}

// assetTotals is ledger.AssetTotals of d, summed in full.
func assetTotals(t testing.TB, d *bun.DB) []ledger.Totals {
	t.Helper()
	list, err := ledger.AssetTotals(context.Background(), d)
	require.NoError(t, err)
	return list
}

// TestIncrementalCheckContinuesTheLatestBoundary: the check continued is
// the one with the latest boundary as a transaction id, not as text (a
// boundary with fewer digits sorted above every later one, and the
// incremental check went on reading from it).
func TestIncrementalCheckContinuesTheLatestBoundary(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	ctx := context.Background()
	credit(t, d, "BTC", "ann", 1_000, "before")
	latest := checkAboveAll(t, d)
	require.Greater(t, latest.Coverage.ToXid, uint64(9), "a boundary with more digits than 9")
	// An older consistent check, recorded later, with a one-digit boundary
	// (by the owner: the runtime role may not).
	_, err := ownerDB(t, u).ExecContext(ctx, `INSERT INTO ledger_checks (checked_at, scope, xid_to, last_posting, consistent, accounts, entries, postings, findings, took_ms)
VALUES (now(), 'full', '9', 0, true, 0, 0, 0, 0, 0)`)
	require.NoError(t, err)
	credit(t, d, "BTC", "ann", 10, "after")

	r := checkIncremental(t, d)
	require.True(t, r.LedgerConsistent, "%+v", r)
	require.Equal(t, *latest.Coverage.CheckID, *r.Coverage.SinceCheck)
	require.Equal(t, latest.Coverage.ToXid, r.Coverage.FromXid)
	require.Equal(t, int64(1), r.Entries, "only the credit after the latest boundary")
}

// TestFullCheckVerifiesCarriedSums: the full check recomputes the system
// accounts' sums below the last consistent check's boundary and names a
// check whose carried sums are not those of the postings (here a row no
// check wrote), where the incremental check would have trusted them.
func TestFullCheckVerifiesCarriedSums(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	ctx := context.Background()
	credit(t, d, "BTC", "ann", 1_000, "before")
	honest := checkAboveAll(t, d)
	credit(t, d, "BTC", "ann", 10, "after")
	again := fullCheck(t, d)
	require.True(t, again.LedgerConsistent, "the sums carried by check %d verified: %+v", *honest.Coverage.CheckID, again)

	var custody int64
	require.NoError(t, d.QueryRowContext(ctx, `SELECT id FROM ledger_accounts WHERE owner = '' AND asset = 'BTC' AND kind = 'custody'`).Scan(&custody))
	_, err := ownerDB(t, u).ExecContext(ctx, `INSERT INTO ledger_checks (checked_at, scope, xid_to, last_posting, consistent, accounts, entries, postings, findings, took_ms, system_sums)
SELECT now(), 'full', pg_snapshot_xmin(pg_current_snapshot()), (SELECT max(id) FROM ledger_postings), true, 0, 0, 0, 0, 0,
       jsonb_build_object(?::text, -5)`, fmt.Sprint(custody)) // postings to custody are negative (AccountKind.Natural)
	require.NoError(t, err)
	forged := count(t, d, `SELECT max(id) FROM ledger_checks`)
	credit(t, d, "BTC", "ann", 20, "later")

	r := fullCheck(t, d)
	require.False(t, r.LedgerConsistent)
	require.Len(t, r.MaterializedVsDerivedDrifts, 1, "%q", r.MaterializedVsDerivedDrifts)
	// Below the forged boundary: the credits before it (other tests'
	// transactions can hold the server's oldest snapshot back, so not
	// necessarily all three).
	there := -count(t, d, `SELECT coalesce(sum(p.amount), 0) FROM ledger_postings p JOIN ledger_entries e ON e.id = p.entry_id
 WHERE p.account_id = ? AND e.created_xact < (SELECT xid_to FROM ledger_checks WHERE id = ?)`, custody, forged)
	require.Contains(t, r.MaterializedVsDerivedDrifts[0], fmt.Sprintf("BTC custody (account %d): check %d carried 0.00000005 below its boundary, but the postings there come to 0.%08d",
		custody, forged, there))
	_, consistent, _ := recorded(t, d, *r.Coverage.CheckID)
	require.False(t, consistent, "recorded as inconsistent")
}
