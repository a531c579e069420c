package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/ledger"
	"svc/platform/dbtest"
)

// TestReadersIgnoreFutureIntegrityRecords: rows written around the
// database's functions (by the owner here, as the runtime role could before
// migration 0033) with a bound beyond the current snapshot or a time in the
// future are ignored and reported: the incremental check does not continue
// from a check ending near the bigint limit (which made every later check
// fail to record), nor from one dated in the future; sealing goes on past a
// checkpoint ending there (which made it find "nothing to seal" for ever),
// and verification skips it and names it.
func TestReadersIgnoreFutureIntegrityRecords(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	owner := ownerDB(t, u)
	ctx := context.Background()
	credit(t, d, "BTC", "ivo", 1_000, "pay-1")
	honest := checkAboveAll(t, d)
	sealUntilAll(t, d)

	_, err := owner.ExecContext(ctx, `INSERT INTO ledger_checks (checked_at, scope, xid_to, last_posting, consistent, accounts, entries, postings, findings, took_ms, system_sums)
VALUES (now(), 'full', ?::xid8, 0, true, 0, 0, 0, 0, 0, '{}'), ('2999-01-01', 'full', pg_snapshot_xmin(pg_current_snapshot()), 0, true, 0, 0, 0, 0, 0, '{}')`, nearTheLimit)
	require.NoError(t, err)
	var last ledger.Checkpoint
	cps, err := ledger.Checkpoints(ctx, d, 1)
	require.NoError(t, err)
	last = cps[len(cps)-1]
	_, err = owner.ExecContext(ctx, `INSERT INTO ledger_checkpoints (seq, xid_from, xid_to, entry_count, root, prev_hash, hash, created_at)
VALUES (?, ?::text::xid8, ?::xid8, 1, sha256('r'), ?, sha256('h'), now())`, last.Seq+1, fmt.Sprint(last.XidTo), nearTheLimit, []byte(last.Hash))
	require.NoError(t, err)
	forgedSeq := last.Seq + 1

	credit(t, d, "BTC", "ivo", 10, "pay-2")
	r := checkIncremental(t, d)
	require.True(t, r.LedgerConsistent, "%+v", r)
	require.Equal(t, *honest.Coverage.CheckID, *r.Coverage.SinceCheck, "continued from the honest check")
	require.Len(t, r.IgnoredRecords, 2, "%q", r.IgnoredRecords)
	require.Contains(t, r.IgnoredRecords[0], "boundary "+nearTheLimit)
	require.Contains(t, r.IgnoredRecords[1], "2999-01-01")
	next := checkIncremental(t, d)
	require.Equal(t, *r.Coverage.CheckID, *next.Coverage.SinceCheck, "and the next one from it")

	cp := sealUntilAll(t, d)
	require.NotNil(t, cp, "sealed past the forged checkpoint")
	require.Equal(t, forgedSeq+1, cp.Seq)
	require.Equal(t, last.XidTo, cp.XidFrom, "its range starts where the believed one ended")
	require.Equal(t, []byte(last.Hash), []byte(cp.PrevHash))
	v, err := ledger.VerifyCheckpoints(ctx, d, 1, nil)
	require.NoError(t, err)
	require.True(t, v.OK, "%+v", v.Mismatch)
	require.Equal(t, []int64{forgedSeq}, v.Ignored)
}

// sealUntilAll checkpoints until every committed entry is sealed (as
// sealAll) and returns the last checkpoint made, nil when none was.
func sealUntilAll(t testing.TB, d *bun.DB) *ledger.Checkpoint {
	t.Helper()
	c := checkpointer(d, nil)
	var last *ledger.Checkpoint
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cp, err := c.Checkpoint(context.Background())
		require.NoError(t, err)
		if cp != nil {
			last = cp
		}
		if count(t, d, `SELECT count(*) FROM ledger_entries e
  WHERE NOT EXISTS (SELECT 1 FROM ledger_checkpoint_leaves() l WHERE l.entry_id = e.id)`) == 0 {
			return last
		}
		require.True(t, time.Now().Before(deadline), "entries still unsealed after 2 minutes")
		time.Sleep(20 * time.Millisecond)
	}
}

// TestScheduledVerificationAlertsOnAMismatch: the worker's verification
// (ledger.Verifier, a River periodic job) goes through the checkpoints a
// slice at a time and raises one operator alert for an entry changed after
// it was sealed; a later run finds it again, without a second alert.
func TestScheduledVerificationAlertsOnAMismatch(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	ctx := context.Background()
	var ids []int64
	for i := range 3 {
		ids = append(ids, credit(t, d, "BTC", "vic", int64(100+i), fmt.Sprintf("p-%d", i)).ID)
		sealUntilAll(t, d)
	}
	alerts := &alert.Service{DB: d, Now: time.Now}
	v := &ledger.Verifier{DB: d, Alerts: alerts, MaxEntries: 1}
	r, err := v.Step(ctx)
	require.NoError(t, err)
	require.True(t, r.OK)
	require.Equal(t, int64(1), r.From)
	r, err = v.Step(ctx)
	require.NoError(t, err)
	require.True(t, r.OK)
	require.Greater(t, r.From, int64(1), "the next slice")

	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `UPDATE ledger_entries SET memo = 'changed' WHERE id = $1`, ids[0]))
	for range 4 { // round the checkpoints until it comes back to the first
		if r, err = v.Step(ctx); err != nil || !r.OK {
			break
		}
	}
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Contains(t, r.Mismatch.String(), fmt.Sprintf("entry %d", ids[0]))
	list, err := alerts.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	var found []alert.Alert
	for _, a := range list {
		if a.Type == ledger.AlertCheckpointMismatch {
			found = append(found, a)
		}
	}
	require.Len(t, found, 1)
	require.Equal(t, fmt.Sprintf("checkpoint %d", r.Mismatch.Checkpoint), found[0].Subject)
	require.True(t, strings.Contains(found[0].Detail, "svc admin ledger verify"), found[0].Detail)

	again, err := v.Step(ctx)
	require.NoError(t, err)
	require.False(t, again.OK, "found again")
	list, err = alerts.List(ctx, alert.ListParams{})
	require.NoError(t, err)
	n := 0
	for _, a := range list {
		if a.Type == ledger.AlertCheckpointMismatch {
			n++
		}
	}
	require.Equal(t, 1, n, "one alert")
}
