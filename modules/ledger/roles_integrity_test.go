package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/dbtest"
)

// nearTheLimit is a transaction id near the bigint limit: a check or
// checkpoint ending there would be the last one ever continued from.
const nearTheLimit = "9223372036854775000"

// TestRuntimeRoleCannotTamperIntegrityRecords connects as the runtime role
// and tries each forgery of the integrity records: a consistent check at
// the current transaction id whose system sums hide an insolvency, a check
// or checkpoint ending near the bigint limit, a liabilities snapshot dated
// 2999. Each is refused by the grants (the runtime role has SELECT alone on
// these tables), and the functions it may execute cannot do the same: they
// take no bound, sum or time from their caller, and refuse a consistent
// check over an entry that does not balance, a total that is not the
// users' balances, and a call outside the repeatable-read transaction
// that read the ledger.
func TestRuntimeRoleCannotTamperIntegrityRecords(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t) // the runtime role
	ctx := context.Background()
	credit(t, d, "BTC", "olga", 1_000, "pay-1")
	honest := checkAboveAll(t, d)
	_, err := checkpointer(d, nil).Checkpoint(ctx)
	require.NoError(t, err)

	var custody int64
	require.NoError(t, d.QueryRowContext(ctx, `SELECT id FROM ledger_accounts WHERE owner = '' AND asset = 'BTC' AND kind = 'custody'`).Scan(&custody))
	records := func() string {
		var s string
		require.NoError(t, d.NewRaw(`SELECT concat_ws('|',
  (SELECT count(*) FROM ledger_checks), (SELECT count(*) FROM ledger_checkpoints), (SELECT count(*) FROM ledger_checkpoint_blocks),
  (SELECT count(*) FROM liabilities_snapshots))`).Scan(ctx, &s))
		return s
	}
	before := records()

	exec := func(query string, args ...any) func() error {
		return func() error {
			_, err := d.ExecContext(ctx, query, args...)
			return err
		}
	}
	// inRR runs query in a repeatable-read transaction, after a first
	// statement that fixes the snapshot (as the service's own callers do).
	inRR := func(query string, args ...any) func() error {
		return func() error {
			return d.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.ExecContext(ctx, `SELECT 1 FROM ledger_entries LIMIT 1`); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, query, args...)
				return err
			})
		}
	}
	for _, tc := range []struct {
		name, want string
		run        func() error
	}{
		// The direct writes of each attack.
		{"ConsistentCheckHidingAnInsolvency", "permission denied", exec(`INSERT INTO ledger_checks (checked_at, scope, xid_to, last_posting,
  consistent, accounts, entries, postings, findings, took_ms, system_sums)
SELECT now(), 'full', pg_snapshot_xmin(pg_current_snapshot()), (SELECT max(id) FROM ledger_postings), true, 0, 0, 0, 0, 0,
       jsonb_build_object(?::text, -1000000000)`, fmt.Sprint(custody))},
		{"CheckNearTheLimit", "permission denied", exec(`INSERT INTO ledger_checks (checked_at, scope, xid_to, last_posting,
  consistent, accounts, entries, postings, findings, took_ms) VALUES (now(), 'full', ?::xid8, 0, true, 0, 0, 0, 0, 0)`, nearTheLimit)},
		{"CheckpointNearTheLimit", "permission denied", exec(`INSERT INTO ledger_checkpoints (seq, xid_from, xid_to, entry_count, root, prev_hash, hash, created_at)
SELECT seq + 1, xid_to, ?::xid8, 1, sha256('r'), hash, sha256('h'), now() FROM ledger_checkpoints ORDER BY seq DESC LIMIT 1`, nearTheLimit)},
		{"CheckpointLeaves", "permission denied", exec(`INSERT INTO ledger_checkpoint_blocks (seq, block, entry_ids, leaves)
SELECT 1, 7, int8send(1), sha256('l')`)},
		{"SnapshotDated2999", "permission denied", exec(`INSERT INTO liabilities_snapshots (asset, taken_at, trigger, users, salt_key, root, total)
VALUES ('BTC', '2999-01-01', 'on_demand', 0, sha256('k'), sha256('r'), 0)`)},
		{"UpdateACheck", "permission denied", exec(`UPDATE ledger_checks SET xid_to = ?::xid8`, nearTheLimit)},
		{"UpdateASnapshot", "permission denied", exec(`UPDATE liabilities_snapshots SET taken_at = '2999-01-01'`)},

		// The functions: outside the transaction that read the ledger...
		{"CheckOutsideItsSnapshot", "repeatable-read", exec(`SELECT ledger_record_check('full', NULL, true, 0, 0, 0, 0, 0)`)},
		{"CheckpointOutsideItsSnapshot", "repeatable-read", exec(`SELECT ledger_record_checkpoint(sha256('r'), sha256('l'), NULL)`)},
		{"SnapshotOutsideItsSnapshot", "repeatable-read", exec(`SELECT liabilities_record_snapshot('BTC', 'on_demand', NULL, 0, sha256('k'), sha256('r'), 0)`)},
		// ... a total that is not the users' balances...
		{"SnapshotHidingALiability", "not 0", inRR(`SELECT liabilities_record_snapshot('BTC', 'on_demand', NULL, 0, sha256('k'), sha256('r'), 0)`)},
		// ... an incremental check that continues another check than the
		// latest consistent one, and a checkpoint whose leaves are not its
		// range's entries.
		{"CheckContinuingAnotherCheck", "continues the latest consistent check",
			inRR(`SELECT ledger_record_check('incremental', ?, true, 0, 0, 0, 0, 0)`, *honest.Coverage.CheckID+100)},
		// (another test's transaction on the server may hold the last
		// checkpoint's boundary below the credit: then the range is not
		// empty, but its entries are not these leaves)
		{"CheckpointOfOtherLeaves", "nothing to seal|leaves", inRR(`SELECT ledger_record_checkpoint(sha256('r'), sha256('l') || sha256('m'), NULL)`)},
	} {
		err := tc.run()
		require.Error(t, err, tc.name)
		found := false
		for _, want := range strings.Split(tc.want, "|") {
			found = found || strings.Contains(err.Error(), want)
		}
		require.True(t, found, "%s: %v", tc.name, err)
		require.Equal(t, before, records(), "%s left a record", tc.name)
	}

	// An entry that does not balance, written around the triggers (as the
	// owner could): the runtime role cannot record a consistent check over
	// it, so the incremental check cannot be made to skip it.
	forged := credit(t, d, "BTC", "olga", 500, "pay-2")
	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
		`UPDATE ledger_postings SET amount = amount * 2 WHERE entry_id = $1 AND amount > 0`, forged.ID))
	err = inRR(`SELECT ledger_record_check('incremental', ?, true, 0, 0, 0, 0, 0)`, *honest.Coverage.CheckID)()
	require.ErrorContains(t, err, fmt.Sprintf("entry %d (BTC) has 2 postings summing to 500", forged.ID))
	require.Equal(t, before, records())
	r := checkIncremental(t, d)
	require.False(t, r.LedgerConsistent)
	require.Equal(t, *honest.Coverage.CheckID, *r.Coverage.SinceCheck)
	require.NotEmpty(t, r.UnbalancedEntries)
	require.Contains(t, strings.Join(r.UnbalancedEntries, "\n"), fmt.Sprintf("entry %d", forged.ID))
}

// TestRecordFunctionsComputeWhatTheyRecord: what the runtime role records
// through the functions is the database's: the boundary is the caller's
// snapshot's, the system sums are those of the postings (whatever the
// caller found), the times are the transaction's.
func TestRecordFunctionsComputeWhatTheyRecord(t *testing.T) {
	t.Parallel()
	_, d := newCheckpointDB(t)
	ctx := context.Background()
	credit(t, d, "BTC", "pia", 1_000, "pay-1")
	var custody int64
	require.NoError(t, d.QueryRowContext(ctx, `SELECT id FROM ledger_accounts WHERE owner = '' AND asset = 'BTC' AND kind = 'custody'`).Scan(&custody))
	var (
		xmin, xidTo  string
		sum, postSum int64
		future       bool
	)
	require.NoError(t, d.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT -coalesce(sum(p.amount), 0) FROM ledger_postings p JOIN ledger_entries e ON e.id = p.entry_id
 WHERE p.account_id = ? AND e.created_xact < pg_snapshot_xmin(pg_current_snapshot())`, custody).Scan(&postSum); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT xid_to::text, -(system_sums ->> ?::text)::bigint, checked_at > clock_timestamp()
  FROM ledger_record_check('full', NULL, true, 0, 0, 0, 0, 0)`, fmt.Sprint(custody)).Scan(&xidTo, &sum, &future)
	}))
	require.Equal(t, xmin, xidTo, "the boundary is the caller's snapshot's")
	require.Equal(t, postSum, sum, "the sums are the postings'")
	require.False(t, future)
}
