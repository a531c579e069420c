package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/merkle"
)

// VerifyReport is what VerifyCheckpoints found.
type VerifyReport struct {
	OK          bool  `json:"ok"`
	Checkpoints int   `json:"checkpoints"` // checked, from From on
	Entries     int64 `json:"entries"`     // entries recomputed
	From        int64 `json:"from"`
	// Signatures says whether signatures were checked: "checked", "no
	// public key" (none configured) or "unsigned" (none of the checked
	// checkpoints is signed).
	Signatures string `json:"signatures"`
	// Through is the last checkpoint whose entries were recomputed.
	Through int64 `json:"through"`
	// Ignored are the checkpoints skipped because their range is beyond
	// the snapshot or their time in the future: no checkpoint of the
	// service is written so (migration 0033), and one is to look into.
	Ignored []int64 `json:"ignored,omitempty"`
	// Mismatch is the first thing that does not match, in checkpoint and
	// then position order; nil when OK.
	Mismatch *Mismatch `json:"mismatch,omitempty"`
}

// Mismatch names the first checkpoint or entry that does not match.
type Mismatch struct {
	Checkpoint int64  `json:"checkpoint"`
	EntryID    *int64 `json:"entry_id,omitempty"`
	Position   *int   `json:"position,omitempty"`
	Reason     string `json:"reason"`
}

func (m *Mismatch) String() string {
	s := fmt.Sprintf("checkpoint %d", m.Checkpoint)
	if m.EntryID != nil {
		s += fmt.Sprintf(", entry %d", *m.EntryID)
	}
	if m.Position != nil {
		s += fmt.Sprintf(" (position %d)", *m.Position)
	}
	return s + ": " + m.Reason
}

type sealedLeaf struct {
	id   int64
	leaf merkle.Hash
}

// VerifyCheckpoints recomputes every checkpoint from seq from on (1 when
// from < 1) out of the ledger's rows, on one snapshot: each entry's leaf
// against the leaf the checkpoint sealed, the root of the sealed leaves,
// the checkpoint's hash over its fields, the chain of hashes and ranges,
// and, with pub, each signature. It stops at the first mismatch. Entries
// not yet sealed are not looked at. A checkpoint whose range is beyond
// the snapshot or whose time is in the future is skipped and listed in
// Ignored: no checkpoint of the service is written so (migration 0033).
func VerifyCheckpoints(ctx context.Context, d *bun.DB, from int64, pub ed25519.PublicKey) (VerifyReport, error) {
	return verifyCheckpoints(ctx, d, from, 0, false, pub)
}

// verifyCheckpoints is VerifyCheckpoints that stops, with maxEntries > 0,
// after the checkpoint that brings the entries recomputed to maxEntries
// (Through is the last one recomputed), and, with chainAll, checks the
// chain of every checkpoint before from as well.
func verifyCheckpoints(ctx context.Context, d *bun.DB, from, maxEntries int64, chainAll bool, pub ed25519.PublicKey) (VerifyReport, error) {
	r := VerifyReport{From: max(from, 1), Signatures: "no public key"}
	err := readOnly(ctx, d, func(q pgx.Tx) error {
		r = VerifyReport{From: max(from, 1), Through: max(from, 1) - 1, Signatures: "no public key"}
		start := r.From - 1
		if chainAll {
			start = 0
		}
		cps, ignored, err := listCheckpoints(ctx, q, start)
		if err != nil {
			return err
		}
		var prev *Checkpoint
		var gap int64
		signed := 0
		for i := range cps {
			cp := cps[i]
			if ignored[i] {
				r.Ignored = append(r.Ignored, cp.Seq)
				if prev != nil {
					gap++
				}
				continue
			}
			if cp.Seq < r.From {
				if chainAll {
					if m := checkChain(cp, prev, gap); m != nil {
						r.Mismatch = m
						return nil
					}
				}
				prev, gap = &cps[i], 0
				continue
			}
			if maxEntries > 0 && r.Entries >= maxEntries {
				break
			}
			r.Checkpoints++
			if m := checkChain(cp, prev, gap); m != nil {
				r.Mismatch = m
				return nil
			}
			if pub != nil && cp.Signature != nil {
				signed++
				if !cp.VerifySignature(pub) {
					r.Mismatch = &Mismatch{Checkpoint: cp.Seq, Reason: "its signature is not the configured key's signature of its hash"}
					return nil
				}
			}
			m, n, err := verifyEntries(ctx, q, cp)
			if err != nil {
				return err
			}
			r.Entries += n
			if m != nil {
				r.Mismatch = m
				return nil
			}
			prev, gap, r.Through = &cps[i], 0, cp.Seq
		}
		switch {
		case pub != nil && signed > 0:
			r.Signatures = "checked"
		case pub != nil:
			r.Signatures = "unsigned"
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("verify checkpoints: %w", err)
	}
	r.OK = r.Mismatch == nil
	return r, nil
}

// checkChain checks what a checkpoint says of itself and of its
// predecessor, gap ignored checkpoints (VerifyReport.Ignored) after it.
func checkChain(cp Checkpoint, prev *Checkpoint, gap int64) *Mismatch {
	bad := func(format string, args ...any) *Mismatch {
		return &Mismatch{Checkpoint: cp.Seq, Reason: fmt.Sprintf(format, args...)}
	}
	h := cp.ComputeHash()
	if !bytes.Equal(h[:], cp.Hash) {
		return bad("its fields hash to %x, not to its stored hash %x: the checkpoint was edited", h, []byte(cp.Hash))
	}
	switch {
	case prev == nil && cp.Seq == 1+gap:
		if !bytes.Equal(cp.PrevHash, make([]byte, merkle.Size)) || cp.XidFrom != 0 {
			return bad("the first checkpoint must start at transaction 0 with a previous hash of zeros")
		}
	case prev == nil:
		return bad("checkpoint %d, which it follows, is missing", cp.Seq-1)
	case cp.Seq != prev.Seq+1+gap:
		return bad("it follows checkpoint %d: checkpoint %d is missing", prev.Seq, prev.Seq+1)
	case !bytes.Equal(cp.PrevHash, prev.Hash):
		return bad("its previous hash %x is not the hash %x of checkpoint %d: a checkpoint was edited or replaced", []byte(cp.PrevHash), []byte(prev.Hash), prev.Seq)
	case cp.XidFrom != prev.XidTo:
		return bad("its range starts at transaction %d, not where checkpoint %d ended (%d)", cp.XidFrom, prev.Seq, prev.XidTo)
	}
	return nil
}

// verifyEntries recomputes the leaves of cp's range and compares them with
// the leaves it sealed.
func verifyEntries(ctx context.Context, q rangeQuerier, cp Checkpoint) (*Mismatch, int64, error) {
	sealed, err := readSealed(ctx, q, cp.Seq)
	if errors.Is(err, errMalformedBlock) {
		return &Mismatch{Checkpoint: cp.Seq, Reason: err.Error() + ": its leaf records were edited"}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var found []sealedLeaf
	var buf []byte
	err = readRange(ctx, q, cp.XidFrom, cp.XidTo, func(e *rangeEntry) error {
		buf = e.appendEncoding(buf[:0])
		found = append(found, sealedLeaf{id: e.id, leaf: merkle.LeafHash(buf)})
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if m := compareLeaves(cp.Seq, sealed, found); m != nil {
		return m, int64(len(found)), nil
	}
	// The entries match the sealed leaves; the sealed leaves must make the
	// checkpoint's root, and be as many as it says.
	leaves := make([]merkle.Hash, len(sealed))
	for i, s := range sealed {
		leaves[i] = s.leaf
	}
	if root := merkle.Root(leaves); !bytes.Equal(root[:], cp.Root) || int64(len(sealed)) != cp.EntryCount {
		return &Mismatch{Checkpoint: cp.Seq, Reason: fmt.Sprintf("its %d sealed leaves hash to root %x, but it says %d entries with root %x: its leaf records were edited",
			len(sealed), root, cp.EntryCount, []byte(cp.Root))}, int64(len(found)), nil
	}
	return nil, int64(len(found)), nil
}

// compareLeaves finds the first position at which the entries found in a
// range differ from what was sealed, and names the entry to blame there:
// one that was sealed and is gone, one that is new in the range, or one
// whose leaf changed (its fields, its postings, or its place).
func compareLeaves(seq int64, sealed, found []sealedLeaf) *Mismatch {
	first := -1
	for i := 0; i < max(len(sealed), len(found)); i++ {
		if i >= len(sealed) || i >= len(found) || sealed[i] != found[i] {
			first = i
			break
		}
	}
	if first < 0 {
		return nil
	}
	sealedAt := make(map[int64]int, len(sealed))
	for i, s := range sealed {
		sealedAt[s.id] = i
	}
	foundAt := make(map[int64]int, len(found))
	for i, f := range found {
		foundAt[f.id] = i
	}
	at := func(id int64, pos int, reason string, args ...any) *Mismatch {
		return &Mismatch{Checkpoint: seq, EntryID: &id, Position: &pos, Reason: fmt.Sprintf(reason, args...)}
	}
	for i := first; i < max(len(sealed), len(found)); i++ {
		if i < len(sealed) {
			s := sealed[i]
			j, ok := foundAt[s.id]
			if !ok {
				return at(s.id, i, "sealed at this position, it is no longer in the checkpoint's range: deleted, or its transaction id was changed")
			}
			if found[j].leaf != s.leaf {
				return at(s.id, i, "its recomputed leaf %x is not the sealed leaf %x: its fields, postings or place in the order were changed", found[j].leaf, s.leaf)
			}
		}
		if i < len(found) {
			f := found[i]
			j, ok := sealedAt[f.id]
			if !ok {
				return at(f.id, i, "it is in the checkpoint's range but was not sealed by it: inserted afterwards, or moved into the range")
			}
			if sealed[j].leaf != f.leaf {
				return at(f.id, j, "its recomputed leaf %x is not the sealed leaf %x: its fields, postings or place in the order were changed", f.leaf, sealed[j].leaf)
			}
		}
	}
	// Same entries, same leaves, another order: cannot happen while the
	// order's keys are in the leaves, but say so rather than nothing.
	return at(found[first].id, first, "the entries are in another order than sealed")
}

// errMalformedBlock: a block of sealed leaves is not where its number
// says, or its two columns disagree.
var errMalformedBlock = errors.New("a block of its sealed leaves is malformed or out of place")

// readSealed reads the ids and leaves checkpoint seq sealed, in position
// order, from its blocks (migration 0020). A block that is not where its
// number says, or whose two columns disagree, is an error: the leaf
// records were edited.
func readSealed(ctx context.Context, q rangeQuerier, seq int64) ([]sealedLeaf, error) {
	rows, err := q.Query(ctx, `SELECT block, entry_ids, leaves FROM ledger_checkpoint_blocks WHERE seq = $1 ORDER BY block`, seq)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %d leaves: %w", seq, err)
	}
	defer rows.Close()
	var (
		sealed      []sealedLeaf
		block       int32
		ids, leaves []byte
	)
	for rows.Next() {
		if err := rows.Scan(&block, &ids, &leaves); err != nil {
			return nil, fmt.Errorf("read checkpoint %d leaves: %w", seq, err)
		}
		if int(block)*blockSize != len(sealed) || len(ids)%8 != 0 || len(leaves) != len(ids)/8*merkle.Size {
			return nil, fmt.Errorf("%w: block %d", errMalformedBlock, block)
		}
		for i := 0; i < len(ids)/8; i++ {
			s := sealedLeaf{id: int64(binary.BigEndian.Uint64(ids[8*i:]))}
			copy(s.leaf[:], leaves[merkle.Size*i:])
			sealed = append(sealed, s)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read checkpoint %d leaves: %w", seq, err)
	}
	return sealed, nil
}

// readOnly runs fn in a read-only repeatable-read transaction on a pgx
// connection of d's pool, with the settings of a long read (no parallel
// workers, no JIT: see Checkpointer.seal).
func readOnly(ctx context.Context, d *bun.DB, fn func(tx pgx.Tx) error) error {
	conn, err := d.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return db.RawPgx(conn.Conn, func(pc *pgx.Conn) error {
		return pgx.BeginTxFunc(ctx, pc, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, db.SerialReadSettings); err != nil {
				return err
			}
			return fn(tx)
		})
	})
}
