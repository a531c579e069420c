package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"svc/platform/background"
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

// blockSize is the number of sealed leaves in one ledger_checkpoint_blocks
// row (migration 0020).
const blockSize = 1024

// Checkpointer makes checkpoints.
type Checkpointer struct {
	DB  *bun.DB
	Key ed25519.PrivateKey // signs each checkpoint's hash; nil: unsigned
	// Now is unused: the database stamps each checkpoint with its
	// transaction's time (ledger_record_checkpoint, migration 0033).
	Now func() time.Time
	Log *slog.Logger
	// Nice is the scheduling priority of the thread that reads and
	// hashes (platform/background): 0 is a goroutine like any other; the
	// service runs its checkpoints at background.Nice, the lowest.
	Nice int
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

	// The reading, encoding and hashing run on a thread of priority Nice
	// (platform/background): at the lowest, the checkpoint takes the CPU
	// that the writers leave.
	var out *Checkpoint
	err = background.Run(c.Nice, func() error {
		return db.RawPgx(conn.Conn, func(pc *pgx.Conn) error {
			return pgx.BeginTxFunc(ctx, pc, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
				out = nil
				cp, err := c.seal(ctx, tx)
				out = cp
				return err
			})
		})
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

// lastCheckpoint returns the latest checkpoint a reader believes (its
// range not beyond q's snapshot, its time not in the future: believable),
// the next sequence number, and the checkpoints it ignored.
func lastCheckpoint(ctx context.Context, q rangeQuerier) (*Checkpoint, int64, []Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT `+checkpointColumns+`, NOT (`+fmt.Sprintf(believable, "xid_to", "created_at")+`)
  FROM ledger_checkpoints
 WHERE seq >= (SELECT coalesce(max(seq), 0) FROM ledger_checkpoints WHERE `+fmt.Sprintf(believable, "xid_to", "created_at")+`)
 ORDER BY seq DESC`)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("read the last checkpoint: %w", err)
	}
	defer rows.Close()
	var (
		last    *Checkpoint
		next    int64 = 1
		ignored []Checkpoint
	)
	for rows.Next() {
		var skip bool
		c, err := scanCheckpoint(scanWith{rows, &skip})
		if err != nil {
			return nil, 0, nil, fmt.Errorf("read the last checkpoint: %w", err)
		}
		next = max(next, c.Seq+1)
		if skip {
			ignored = append(ignored, c)
			continue
		}
		last = &c
	}
	if err := rows.Err(); err != nil {
		return nil, 0, nil, fmt.Errorf("read the last checkpoint: %w", err)
	}
	return last, next, ignored, nil
}

// scanWith scans a row's checkpoint columns and then more.
type scanWith struct {
	row  interface{ Scan(...any) error }
	more *bool
}

func (s scanWith) Scan(dest ...any) error { return s.row.Scan(append(dest, s.more)...) }

// listCheckpoints is Checkpoints in a pgx transaction, with, for each,
// whether a reader ignores it (not believable).
func listCheckpoints(ctx context.Context, q rangeQuerier, from int64) ([]Checkpoint, []bool, error) {
	rows, err := q.Query(ctx, `SELECT `+checkpointColumns+`, NOT (`+fmt.Sprintf(believable, "xid_to", "created_at")+`)
  FROM ledger_checkpoints WHERE seq >= $1 ORDER BY seq`, from)
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer rows.Close()
	var (
		out     []Checkpoint
		ignored []bool
	)
	for rows.Next() {
		var skip bool
		c, err := scanCheckpoint(scanWith{rows, &skip})
		if err != nil {
			return nil, nil, fmt.Errorf("list checkpoints: %w", err)
		}
		out, ignored = append(out, c), append(ignored, skip)
	}
	return out, ignored, rows.Err()
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

// seal makes the checkpoint of the entries committed since the previous
// one, in tx (repeatable read, nothing run in it yet), or nil when there
// is nothing to seal.
func (c *Checkpointer) seal(ctx context.Context, tx pgx.Tx) (*Checkpoint, error) {
	var (
		to uint64
		at time.Time
	)
	// The first statement: it fixes the snapshot. The checkpoint's time is
	// the transaction's (the database stamps it: ledger_record_checkpoint).
	if err := tx.QueryRow(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot()), now()").Scan(&to, &at); err != nil {
		return nil, err
	}
	// The job reads with one process of the server, not with parallel
	// workers (whose CPU the writers need more), and does not compile
	// its statements (JIT costs more here than it saves).
	if _, err := tx.Exec(ctx, db.SerialReadSettings); err != nil {
		return nil, err
	}
	prev, next, ignored, err := lastCheckpoint(ctx, tx)
	if err != nil {
		return nil, err
	}
	for _, g := range ignored {
		if c.Log != nil {
			c.Log.ErrorContext(ctx, "ledger checkpoint: a checkpoint beyond this snapshot or in the future is ignored; no checkpoint of the service writes one",
				"seq", g.Seq, "xid_from", g.XidFrom, "xid_to", g.XidTo, "snapshot_xmin", to, "created_at", g.CreatedAt)
		}
	}
	cp := Checkpoint{Seq: next, PrevHash: make(Hex, merkle.Size)}
	if prev != nil {
		cp.XidFrom, cp.PrevHash = prev.XidTo, prev.Hash
	}
	if to <= cp.XidFrom {
		return nil, nil
	}
	cp.XidTo = to
	ids, leaves, err := c.leaves(ctx, tx, cp.XidFrom, cp.XidTo)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil // nothing new: the next checkpoint starts at the same place
	}
	root := merkle.Root(leaves)
	cp.EntryCount, cp.Root = int64(len(ids)), root[:]
	cp.CreatedAt = at.UTC()
	h := cp.ComputeHash()
	cp.Hash = h[:]
	if c.Key != nil {
		cp.Signature = ed25519.Sign(c.Key, cp.Hash)
	}
	all := make([]byte, 0, merkle.Size*len(leaves))
	for _, l := range leaves {
		all = append(all, l[:]...)
	}
	// The database computes the range, the count, the time and the hash
	// again from this snapshot, and stores the sealed ids itself
	// (migration 0033); they must be what was read and signed here.
	stored, err := scanCheckpoint(tx.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM ledger_record_checkpoint($1, $2, $3)`,
		[]byte(cp.Root), all, nullBytes(cp.Signature)))
	if err != nil {
		return nil, fmt.Errorf("store checkpoint %d: %w", cp.Seq, err)
	}
	if stored.Seq != cp.Seq || stored.XidFrom != cp.XidFrom || stored.XidTo != cp.XidTo || stored.EntryCount != cp.EntryCount ||
		!bytes.Equal(stored.Hash, cp.Hash) {
		return nil, fmt.Errorf("store checkpoint %d: the database sealed checkpoint %d of [%d, %d), %d entries, hash %x; this run read [%d, %d), %d entries, hash %x",
			cp.Seq, stored.Seq, stored.XidFrom, stored.XidTo, stored.EntryCount, []byte(stored.Hash), cp.XidFrom, cp.XidTo, cp.EntryCount, []byte(cp.Hash))
	}
	return &cp, nil
}

// leaves reads the range [from, to) and returns its entries' ids and leaf
// hashes in order.
func (c *Checkpointer) leaves(ctx context.Context, tx pgx.Tx, from, to uint64) ([]int64, []merkle.Hash, error) {
	var (
		ids    []int64
		leaves []merkle.Hash
	)
	var buf []byte
	err := readRange(ctx, tx, from, to, func(e *rangeEntry) error {
		buf = e.appendEncoding(buf[:0])
		ids = append(ids, e.id)
		leaves = append(leaves, merkle.LeafHash(buf))
		return nil
	})
	return ids, leaves, err
}
