package ledger

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/merkle"
)

// # Checkpoints
//
// A checkpoint seals, tamper-evidently, the entries committed since the
// previous one (docs/checkpoints.md has the design and the encodings byte
// by byte). Writers of the ledger do nothing for it: no lock, no hash. The
// checkpoint job reads, in one repeatable-read transaction, the entries
// whose writing transaction id (ledger_entries.created_xact) lies in
//
//	[previous checkpoint's xid_to, X),  X = pg_snapshot_xmin(pg_current_snapshot())
//
// in (created_xact, id) order, and stores the Merkle root (RFC 6962) of
// their canonical encodings, chained to the previous checkpoint's hash.
//
// Why no entry can ever land below a sealed range: X is the xmin of the
// transaction's snapshot, the oldest transaction id still running when the
// snapshot was taken (or the next id to be assigned when none ran). So
// every transaction with an id below X had ended, committed or aborted,
// before the snapshot was taken, and the snapshot sees all of the
// committed ones. Transaction ids are assigned in increasing order (xid8
// never wraps), so a transaction that commits after the snapshot either
// was running at that moment (its id is at least X) or got its id later
// (above every id assigned before, hence at least X as well). Its entries
// therefore have created_xact >= X and fall in a later range. Ranges start
// where the previous one ended, so they neither overlap nor leave gaps:
// every entry is sealed exactly once, by the first checkpoint whose X is
// above its transaction id. The id order inside a transaction and the
// transaction ids are both stored in the entry, so the order is fixed too.
//
// The price is a delay, not a loss: an entry is sealed once every
// transaction on the server that started before its own has ended, and a
// long-running transaction anywhere on the server holds the next
// checkpoints back until it ends.
//
// Two checkpoint runs at once (the periodic job and svc admin ledger
// checkpoint) are serialised by a session advisory lock taken before the
// repeatable-read transaction begins, so the second one reads the first
// one's checkpoint; the unique seq and xid_from of ledger_checkpoints make
// a second checkpoint of one range impossible whatever the code does.

// checkpointLockKey is the advisory lock of checkpoint runs.
const checkpointLockKey = "svc.ledger.checkpoint"

// leafBatch is how many leaf rows one INSERT carries.
const leafBatch = 5000

// Checkpointer makes checkpoints.
type Checkpointer struct {
	DB  *bun.DB
	Key ed25519.PrivateKey // signs each checkpoint's hash; nil: unsigned
	Now func() time.Time
	Log *slog.Logger
}

// CheckpointEvery is the default interval of the periodic checkpoint.
const CheckpointEvery = 10 * time.Minute

// Checkpoint seals the entries committed since the previous checkpoint
// and returns the new checkpoint, or nil when there is nothing to seal.
func (c *Checkpointer) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	conn, err := c.DB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer conn.Close()
	// A session lock, taken before the transaction: its snapshot is then
	// taken after the previous run has committed (a transaction-level lock
	// would come after the snapshot of its own first statement).
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtextextended(?, 0))", checkpointLockKey); err != nil {
		return nil, fmt.Errorf("checkpoint: lock: %w", err)
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended(?, 0))", checkpointLockKey); err != nil {
			// The connection must not go back to the pool still holding
			// the lock: discard it (its session ends, and the lock with it).
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	var out *Checkpoint
	err = conn.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, func(ctx context.Context, tx bun.Tx) error {
		out = nil
		q := tx.Tx
		var xmin string
		// The first statement: it fixes the snapshot.
		if err := q.QueryRowContext(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text").Scan(&xmin); err != nil {
			return err
		}
		to, err := strconv.ParseUint(xmin, 10, 64)
		if err != nil {
			return fmt.Errorf("xmin %q: %w", xmin, err)
		}
		prev, err := lastCheckpoint(ctx, q)
		if err != nil {
			return err
		}
		cp := Checkpoint{Seq: 1, PrevHash: make(Hex, merkle.Size)}
		if prev != nil {
			cp.Seq, cp.XidFrom, cp.PrevHash = prev.Seq+1, prev.XidTo, prev.Hash
		}
		if to <= cp.XidFrom {
			return nil
		}
		cp.XidTo = to
		var ids []int64
		var leaves []merkle.Hash
		err = readRange(ctx, q, cp.XidFrom, cp.XidTo, func(e SealedEntry) error {
			ids = append(ids, e.ID)
			leaves = append(leaves, e.Leaf())
			return nil
		})
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil // nothing new: the next checkpoint starts at the same place
		}
		root := merkle.Root(leaves)
		cp.EntryCount, cp.Root = int64(len(ids)), root[:]
		cp.CreatedAt = c.Now().UTC().Truncate(time.Microsecond)
		h := cp.ComputeHash()
		cp.Hash = h[:]
		if c.Key != nil {
			cp.Signature = ed25519.Sign(c.Key, cp.Hash)
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO ledger_checkpoints (seq, xid_from, xid_to, entry_count, root, prev_hash, hash, signature, created_at)
VALUES ($1, $2::text::xid8, $3::text::xid8, $4, $5, $6, $7, $8, $9)`,
			cp.Seq, strconv.FormatUint(cp.XidFrom, 10), strconv.FormatUint(cp.XidTo, 10), cp.EntryCount,
			[]byte(cp.Root), []byte(cp.PrevHash), []byte(cp.Hash), nullBytes(cp.Signature), cp.CreatedAt); err != nil {
			return fmt.Errorf("store checkpoint %d: %w", cp.Seq, err)
		}
		for lo := 0; lo < len(ids); lo += leafBatch {
			hi := min(lo+leafBatch, len(ids))
			pos := make([]int32, hi-lo)
			lv := make([][]byte, hi-lo)
			for i := lo; i < hi; i++ {
				pos[i-lo] = int32(i)
				lv[i-lo] = leaves[i][:]
			}
			if _, err := q.ExecContext(ctx, `INSERT INTO ledger_checkpoint_leaves (seq, position, entry_id, leaf)
SELECT $1, * FROM unnest($2::int[], $3::bigint[], $4::bytea[])`, cp.Seq, pos, ids[lo:hi], lv); err != nil {
				return fmt.Errorf("store checkpoint %d leaves: %w", cp.Seq, err)
			}
		}
		out = &cp
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if out != nil && c.Log != nil {
		c.Log.Info("ledger checkpoint", "seq", out.Seq, "entries", out.EntryCount, "xid_from", out.XidFrom, "xid_to", out.XidTo,
			"root", fmt.Sprintf("%x", []byte(out.Root)), "signed", out.Signature != nil)
	}
	return out, nil
}

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

const checkpointColumns = `seq, xid_from::text, xid_to::text, entry_count, root, prev_hash, hash, signature, created_at`

func scanCheckpoint(row interface{ Scan(...any) error }) (Checkpoint, error) {
	var c Checkpoint
	var from, to string
	var root, prev, hash, sig []byte
	if err := row.Scan(&c.Seq, &from, &to, &c.EntryCount, &root, &prev, &hash, &sig, &c.CreatedAt); err != nil {
		return c, err
	}
	var err error
	if c.XidFrom, err = strconv.ParseUint(from, 10, 64); err != nil {
		return c, err
	}
	if c.XidTo, err = strconv.ParseUint(to, 10, 64); err != nil {
		return c, err
	}
	c.Root, c.PrevHash, c.Hash, c.CreatedAt = root, prev, hash, c.CreatedAt.UTC()
	if sig != nil {
		c.Signature = sig
	}
	return c, nil
}

func lastCheckpoint(ctx context.Context, q db.Querier) (*Checkpoint, error) {
	c, err := scanCheckpoint(q.QueryRowContext(ctx, `SELECT `+checkpointColumns+` FROM ledger_checkpoints ORDER BY seq DESC LIMIT 1`))
	if db.IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the last checkpoint: %w", err)
	}
	return &c, nil
}

// Checkpoints lists the checkpoints from seq from on, in order.
func Checkpoints(ctx context.Context, idb bun.IDB, from int64) ([]Checkpoint, error) {
	q, err := db.SQLOf(idb)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, `SELECT `+checkpointColumns+` FROM ledger_checkpoints WHERE seq >= $1 ORDER BY seq`, from)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer rows.Close()
	var out []Checkpoint
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// readRange calls fn with every entry whose transaction id is in [from,
// to), in (transaction id, id) order, each with its postings in id order.
// Entries and postings are read as they are, whatever they are: an entry
// that lost its postings, or a posting whose account is gone, is encoded
// as found (so that it fails to match its leaf).
func readRange(ctx context.Context, q db.Querier, from, to uint64, fn func(SealedEntry) error) error {
	rows, err := q.QueryContext(ctx, `SELECT e.id, e.created_xact::text, e.kind, e.asset, e.source_ref, e.memo, e.created_at,
       p.id, p.account_id, a.asset, a.kind, a.owner, p.amount, p.balance_after
  FROM ledger_entries e
  LEFT JOIN ledger_postings p ON p.entry_id = e.id
  LEFT JOIN ledger_accounts a ON a.id = p.account_id
 WHERE e.created_xact >= $1::text::xid8 AND e.created_xact < $2::text::xid8
 ORDER BY e.created_xact, e.id, p.id`, strconv.FormatUint(from, 10), strconv.FormatUint(to, 10))
	if err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	defer rows.Close()
	var cur *SealedEntry
	for rows.Next() {
		var (
			e                        SealedEntry
			xact                     string
			memo                     sql.NullString
			pid, acct, amount, after sql.NullInt64
			aAsset, aKind, aOwner    sql.NullString
		)
		if err := rows.Scan(&e.ID, &xact, &e.Kind, &e.Asset, &e.SourceRef, &memo, &e.CreatedAt,
			&pid, &acct, &aAsset, &aKind, &aOwner, &amount, &after); err != nil {
			return fmt.Errorf("read ledger range: %w", err)
		}
		if cur == nil || cur.ID != e.ID {
			if cur != nil {
				if err := fn(*cur); err != nil {
					return err
				}
			}
			if e.XactID, err = strconv.ParseUint(xact, 10, 64); err != nil {
				return fmt.Errorf("entry %d: transaction id %q: %w", e.ID, xact, err)
			}
			if memo.Valid {
				e.Memo = &memo.String
			}
			e.CreatedAt = e.CreatedAt.UTC()
			cur = &e
		}
		if pid.Valid {
			p := SealedPosting{ID: pid.Int64, AccountID: acct.Int64, AccountAsset: aAsset.String, AccountKind: aKind.String,
				AccountOwner: aOwner.String, Amount: amount.Int64}
			if after.Valid {
				v := after.Int64
				p.BalanceAfter = &v
			}
			cur.Postings = append(cur.Postings, p)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	if cur != nil {
		return fn(*cur)
	}
	return nil
}
