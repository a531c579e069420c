package ledger_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// newCheckpointDB returns a fresh database's URL and a runtime-role handle
// on it.
func newCheckpointDB(t testing.TB) (string, *bun.DB) {
	t.Helper()
	u := dbtest.NewURL(t)
	d, err := db.Open(context.Background(), u, 8)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return u, d.Bun
}

// ownerDB connects to the database of u as the schema owner, for a test
// that writes what the runtime role may not (an integrity record written
// around the database's functions, as before migration 0033).
func ownerDB(t testing.TB, u string) *bun.DB {
	t.Helper()
	d, err := db.Open(context.Background(), dbtest.OwnerURL(u), 2)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d.Bun
}

func checkpointer(d *bun.DB, key ed25519.PrivateKey) *ledger.Checkpointer {
	return &ledger.Checkpointer{DB: d, Key: key, Now: time.Now}
}

// sealAll checkpoints until every committed entry is sealed. Other
// databases of the shared test server hold transactions too, and an entry
// is sealed once every transaction older than its own has ended.
func sealAll(t testing.TB, c *ledger.Checkpointer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.Checkpoint(context.Background())
		require.NoError(t, err)
		if count(t, c.DB, `SELECT count(*) FROM ledger_entries e
  WHERE NOT EXISTS (SELECT 1 FROM ledger_checkpoint_leaves() l WHERE l.entry_id = e.id)`) == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "entries still unsealed after 2 minutes")
		time.Sleep(20 * time.Millisecond)
	}
}

// requireChain checks the chain as stored: seq 1..n, each range starting
// where the previous one ended, every entry below the last range's end
// sealed exactly once, and VerifyCheckpoints finding nothing.
func requireChain(t testing.TB, d *bun.DB, pub ed25519.PublicKey) []ledger.Checkpoint {
	t.Helper()
	ctx := context.Background()
	cps, err := ledger.Checkpoints(ctx, d, 1)
	require.NoError(t, err)
	require.NotEmpty(t, cps)
	var sum int64
	for i, cp := range cps {
		require.Equal(t, int64(i+1), cp.Seq)
		if i == 0 {
			require.Zero(t, cp.XidFrom)
		} else {
			require.Equal(t, cps[i-1].XidTo, cp.XidFrom, "checkpoint %d starts where %d ended", cp.Seq, cp.Seq-1)
			require.Equal(t, []byte(cps[i-1].Hash), []byte(cp.PrevHash))
		}
		require.Less(t, cp.XidFrom, cp.XidTo)
		sum += cp.EntryCount
	}
	last := cps[len(cps)-1]
	require.Equal(t, sum, count(t, d, `SELECT count(*) FROM ledger_checkpoint_leaves()`))
	require.Equal(t, sum, count(t, d, `SELECT count(DISTINCT entry_id) FROM ledger_checkpoint_leaves()`))
	require.Equal(t, sum, count(t, d, `SELECT count(*) FROM ledger_entries WHERE created_xact < ?::text::xid8`, fmt.Sprint(last.XidTo)),
		"every entry below the last range's end is sealed")
	require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_checkpoint_leaves() l JOIN ledger_checkpoints c USING (seq)
  JOIN ledger_entries e ON e.id = l.entry_id WHERE e.created_xact < c.xid_from OR e.created_xact >= c.xid_to`), "an entry sealed outside its range")
	r, err := ledger.VerifyCheckpoints(ctx, d, 1, pub)
	require.NoError(t, err)
	require.True(t, r.OK, "%v", r.Mismatch)
	require.Equal(t, len(cps), r.Checkpoints)
	require.Equal(t, sum, r.Entries)
	return cps
}

// TestCheckpointChainAcrossRestartsAndWorkers: several checkpointers (the
// workers of several processes, and svc admin ledger checkpoint) run at
// once while entries are posted, then the process "restarts" (a new
// connection pool and checkpointer) and goes on. The chain has one
// checkpoint per range, never two, every entry is sealed exactly once, and
// it verifies.
func TestCheckpointChainAcrossRestartsAndWorkers(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	ctx := context.Background()
	for i := range 5 {
		credit(t, d, "BTC", "ana", 1_000, fmt.Sprintf("pay-%d", i))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // a writer all along
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			credit(t, d, "BTC", fmt.Sprintf("u%d", i%7), 10, fmt.Sprintf("w-%d", i))
		}
	}()
	var made sync.Map
	var cw sync.WaitGroup
	for w := range 4 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			p, err := db.Open(ctx, u, 3) // a process of its own
			require.NoError(t, err)
			defer p.Close()
			c := checkpointer(p.Bun, nil)
			for range 8 {
				cp, err := c.Checkpoint(ctx)
				require.NoError(t, err, "worker %d", w)
				if cp != nil {
					_, dup := made.LoadOrStore(cp.Seq, w)
					require.False(t, dup, "checkpoint %d made twice", cp.Seq)
				}
			}
		}()
	}
	cw.Wait()
	close(stop)
	wg.Wait()
	sealAll(t, checkpointer(d, nil))
	before := requireChain(t, d, nil)

	// A restart: a new pool, a new checkpointer, more entries.
	p, err := db.Open(ctx, u, 3)
	require.NoError(t, err)
	defer p.Close()
	for i := range 3 {
		credit(t, p.Bun, "BTC", "ana", 5, fmt.Sprintf("after-%d", i))
	}
	sealAll(t, checkpointer(p.Bun, nil))
	after := requireChain(t, p.Bun, nil)
	require.Greater(t, len(after), len(before))
	require.Equal(t, before, after[:len(before)], "earlier checkpoints never change")

	// --from N checks N onwards only, chained to N-1's stored hash.
	r, err := ledger.VerifyCheckpoints(ctx, p.Bun, int64(len(before)+1), nil)
	require.NoError(t, err)
	require.True(t, r.OK, "%v", r.Mismatch)
	require.Equal(t, len(after)-len(before), r.Checkpoints)
	r, err = ledger.VerifyCheckpoints(ctx, p.Bun, int64(len(after)+1), nil)
	require.NoError(t, err)
	require.True(t, r.OK)
	require.Zero(t, r.Checkpoints)

	// Nothing new: no checkpoint.
	cp, err := checkpointer(p.Bun, nil).Checkpoint(ctx)
	require.NoError(t, err)
	require.Nil(t, cp)
}

// TestLateCommitNeverLandsBelowASealedRange: a transaction writes an entry
// and stays open while later transactions commit theirs and checkpoints
// are taken. The open transaction holds the checkpoints' xmin at or below
// its id, so its entry, committed last, is sealed by a checkpoint after
// every checkpoint taken before it committed, and the earlier ranges stay
// as they were.
func TestLateCommitNeverLandsBelowASealedRange(t *testing.T) {
	t.Parallel()
	_, d := newCheckpointDB(t)
	ctx := context.Background()
	c := checkpointer(d, nil)
	credit(t, d, "BTC", "bob", 1_000, "early")
	sealAll(t, c)

	tx, err := d.BeginTx(ctx, nil)
	require.NoError(t, err)
	late, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder("bob"), 7, "late", "")
	require.NoError(t, err)
	var lateXact string
	require.NoError(t, tx.NewRaw(`SELECT pg_current_xact_id()::text`).Scan(ctx, &lateXact))

	// Later transactions commit while it is open; checkpoints are taken.
	for i := range 3 {
		credit(t, d, "BTC", "carol", 100, fmt.Sprintf("after-%d", i))
		_, err := c.Checkpoint(ctx)
		require.NoError(t, err)
	}
	sealedBefore, err := ledger.Checkpoints(ctx, d, 1)
	require.NoError(t, err)
	for _, cp := range sealedBefore {
		require.LessOrEqual(t, cp.XidTo, mustUint(t, lateXact), "checkpoint %d sealed past an open transaction", cp.Seq)
	}
	require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_checkpoint_leaves() l JOIN ledger_entries e ON e.id = l.entry_id
  WHERE e.source_ref LIKE 'after-%'`), "entries of later transactions wait for the open one")

	require.NoError(t, tx.Commit())
	sealAll(t, c)
	cps := requireChain(t, d, nil)
	require.Equal(t, sealedBefore, cps[:len(sealedBefore)], "the ranges sealed before the commit are unchanged")
	var seq int64
	require.NoError(t, d.NewRaw(`SELECT seq FROM ledger_checkpoint_leaves() WHERE entry_id = ?`, late.ID).Scan(ctx, &seq))
	require.Greater(t, seq, sealedBefore[len(sealedBefore)-1].Seq, "the late entry is sealed after every earlier checkpoint")
}

func mustUint(t testing.TB, s string) uint64 {
	var v uint64
	_, err := fmt.Sscan(s, &v)
	require.NoError(t, err)
	return v
}

// forged is the id of an entry forged into a sealed range.
const forged = 999999

// TestVerifyNamesTheTampering corrupts a sealed ledger as a superuser with
// the triggers off, one way per case, and verify reports the entry or the
// checkpoint.
func TestVerifyNamesTheTampering(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// tamper corrupts; it gets the entries' ids in order and returns
		// the entry verify must name (0: none) and the checkpoint (0: the
		// one that sealed the entry).
		tamper func(t *testing.T, u string, ids []int64) (entry int64, seq int64)
		want   string
	}{
		{"PostingAmount", func(t *testing.T, u string, ids []int64) (int64, int64) {
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`UPDATE ledger_postings SET amount = amount + 1 WHERE id = (SELECT min(id) FROM ledger_postings WHERE entry_id = $1)`, ids[2]))
			return ids[2], 0
		}, "were changed"},
		{"DeletedEntry", func(t *testing.T, u string, ids []int64) (int64, int64) {
			dbtest.ExecBehindTriggers(t, u, `DELETE FROM ledger_postings WHERE entry_id = $1`, ids[1])
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `DELETE FROM ledger_entries WHERE id = $1`, ids[1]))
			return ids[1], 0
		}, "no longer in the checkpoint's range"},
		{"ReorderedEntry", func(t *testing.T, u string, ids []int64) (int64, int64) {
			// The first entry moved behind the last (within the range when
			// one checkpoint sealed both; otherwise out of it: either way
			// verify names it).
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`UPDATE ledger_entries SET created_xact = (SELECT created_xact FROM ledger_entries WHERE id = $2) WHERE id = $1`, ids[0], ids[4]))
			return ids[0], 0
		}, ""},
		{"EditedCheckpointRoot", func(t *testing.T, u string, _ []int64) (int64, int64) {
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`UPDATE ledger_checkpoints SET root = sha256(root) WHERE seq = 1`))
			return 0, 1
		}, "the checkpoint was edited"},
		{"EditedCheckpointRehashed", func(t *testing.T, u string, _ []int64) (int64, int64) {
			// An edit that also fixes its own hash breaks the next link.
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`UPDATE ledger_checkpoints SET hash = sha256(hash) WHERE seq = 1`))
			return 0, 1
		}, "the checkpoint was edited"},
		{"EditedLeafRecord", func(t *testing.T, u string, ids []int64) (int64, int64) {
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`UPDATE ledger_checkpoint_blocks b SET leaves = overlay(b.leaves PLACING sha256(l.leaf) FROM 32 * (l.position - 1024 * b.block) + 1 FOR 32)
  FROM ledger_checkpoint_leaves() l WHERE l.entry_id = $1 AND b.seq = l.seq AND b.block = l.position / 1024`, ids[3]))
			return ids[3], 0
		}, "is not the sealed leaf"},
		{"DroppedLeafBlock", func(t *testing.T, u string, ids []int64) (int64, int64) {
			// A block moved away from its place: the leaves it held are gone.
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`UPDATE ledger_checkpoint_blocks SET block = block + 1 WHERE seq = 1 AND block = 0`))
			return 0, 1
		}, "leaf records were edited"},
		{"InsertedIntoASealedRange", func(t *testing.T, u string, ids []int64) (int64, int64) {
			require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u,
				`INSERT INTO ledger_entries (id, kind, asset, source_ref, created_xact)
  OVERRIDING SYSTEM VALUE SELECT $2, 'correction', 'BTC', 'forged', created_xact FROM ledger_entries WHERE id = $1`, ids[2], forged))
			return forged, 0
		}, "was not sealed by it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, d := newCheckpointDB(t)
			var ids []int64
			for i := range 5 {
				ids = append(ids, credit(t, d, "BTC", "dan", int64(100+i), fmt.Sprintf("p-%d", i)).ID)
			}
			c := checkpointer(d, nil)
			sealAll(t, c)
			credit(t, d, "BTC", "dan", 1, "later")
			sealAll(t, c)
			requireChain(t, d, nil)
			sealedBy := map[int64]int64{}
			for _, id := range ids {
				sealedBy[id] = count(t, d, `SELECT seq FROM ledger_checkpoint_leaves() WHERE entry_id = ?`, id)
			}

			entry, seq := tc.tamper(t, u, ids)
			if seq == 0 {
				seq = sealedBy[entry]
			}
			if entry == forged {
				seq = sealedBy[ids[2]] // forged into ids[2]'s range
			}
			r, err := ledger.VerifyCheckpoints(context.Background(), d, 1, nil)
			require.NoError(t, err)
			require.False(t, r.OK)
			require.NotNil(t, r.Mismatch)
			require.Equal(t, seq, r.Mismatch.Checkpoint, r.Mismatch.String())
			if entry != 0 {
				require.NotNil(t, r.Mismatch.EntryID, r.Mismatch.String())
				require.Equal(t, entry, *r.Mismatch.EntryID, r.Mismatch.String())
			}
			require.Contains(t, r.Mismatch.Reason, tc.want)
		})
	}
}

// TestCheckpointsAreSigned: with a key, every checkpoint carries the key's
// signature of its hash; verify checks it, and another key fails.
func TestCheckpointsAreSigned(t *testing.T) {
	t.Parallel()
	_, d := newCheckpointDB(t)
	pub, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	credit(t, d, "BTC", "eve", 1_000, "pay")
	sealAll(t, checkpointer(d, key))
	cps := requireChain(t, d, pub)
	for _, cp := range cps {
		require.True(t, cp.VerifySignature(pub))
		require.True(t, ed25519.Verify(pub, cp.Hash, cp.Signature))
	}
	other, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	r, err := ledger.VerifyCheckpoints(context.Background(), d, 1, other)
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Contains(t, r.Mismatch.Reason, "signature")
}

// TestCheckpointTablesAreAppendOnly: the runtime role may not change or
// delete a checkpoint or a sealed leaf, and the owner is refused by the
// triggers.
func TestCheckpointTablesAreAppendOnly(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	credit(t, d, "BTC", "fay", 1_000, "pay")
	sealAll(t, checkpointer(d, nil))
	owner, err := db.Open(context.Background(), dbtest.OwnerURL(u), 2)
	require.NoError(t, err)
	defer owner.Close()
	for _, stmt := range []string{
		`UPDATE ledger_checkpoints SET entry_count = entry_count + 1`,
		`DELETE FROM ledger_checkpoints`,
		`TRUNCATE ledger_checkpoints CASCADE`,
		`UPDATE ledger_checkpoint_blocks SET block = block + 1`,
		`DELETE FROM ledger_checkpoint_blocks`,
		`TRUNCATE ledger_checkpoint_blocks`,
	} {
		_, err := d.ExecContext(context.Background(), stmt)
		require.ErrorContains(t, err, "permission denied", "runtime role: %s", stmt)
		_, err = owner.Bun.ExecContext(context.Background(), stmt)
		require.ErrorContains(t, err, "append-only", "owner: %s", stmt)
	}
	requireChain(t, d, nil)
}
