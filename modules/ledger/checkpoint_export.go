package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"svc/platform/merkle"
)

// ExportFormat names the export's layout (docs/checkpoints.md).
const ExportFormat = "svc-ledger-checkpoint-export/1"

// Export is one checkpoint with every entry it sealed and each entry's
// inclusion proof: enough for a verifier with the published root (and the
// public key) to check the range offline (VerifyExport).
type Export struct {
	Format     string          `json:"format"`
	Checkpoint Checkpoint      `json:"checkpoint"`
	Entries    []ExportedEntry `json:"entries"`
}

// ExportedEntry is an entry at its position in the checkpoint's tree.
type ExportedEntry struct {
	Position int         `json:"position"`
	Leaf     Hex         `json:"leaf"`
	Proof    []Hex       `json:"proof"` // sibling hashes from the leaf up (RFC 6962 audit path)
	Entry    SealedEntry `json:"entry"`
}

// ErrNoCheckpoint: no checkpoint has that number.
var ErrNoCheckpoint = fmt.Errorf("no such checkpoint")

// ExportCheckpoint reads checkpoint seq and its entries, as they are now,
// on one snapshot. Proofs are computed from the leaves the checkpoint
// sealed; an entry changed since does not match its leaf, and the export
// shows that (VerifyExport fails on it).
func ExportCheckpoint(ctx context.Context, d *bun.DB, seq int64) (Export, error) {
	x := Export{Format: ExportFormat}
	err := readOnly(ctx, d, func(q pgx.Tx) error {
		cp, err := scanCheckpoint(q.QueryRow(ctx, `SELECT `+checkpointColumns+` FROM ledger_checkpoints WHERE seq = $1`, seq))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %d", ErrNoCheckpoint, seq)
		}
		if err != nil {
			return err
		}
		x.Checkpoint = cp
		sealed, err := readSealed(ctx, q, seq)
		if err != nil {
			return err
		}
		leaves := make([]merkle.Hash, len(sealed))
		for i, s := range sealed {
			leaves[i] = s.leaf
		}
		proofs := merkle.Proofs(leaves)
		x.Entries = make([]ExportedEntry, 0, len(leaves))
		return readRange(ctx, q, cp.XidFrom, cp.XidTo, func(e *rangeEntry) error {
			i := len(x.Entries)
			ee := ExportedEntry{Position: i, Entry: e.sealed()}
			if i < len(leaves) {
				ee.Leaf = leaves[i][:]
				for _, p := range proofs[i] {
					ee.Proof = append(ee.Proof, p[:])
				}
			}
			x.Entries = append(x.Entries, ee)
			return nil
		})
	})
	if err != nil {
		return Export{}, fmt.Errorf("export checkpoint %d: %w", seq, err)
	}
	return x, nil
}

// ExportCheck is what VerifyExport checks besides the export itself: the
// root and hash published, and the public key. Empty fields are not
// checked.
type ExportCheck struct {
	Root      []byte
	Hash      []byte
	PublicKey ed25519.PublicKey
}

// VerifyExport checks an export with nothing but itself and what c gives:
// its format, the checkpoint's hash over its fields (and the published
// root and hash, and the signature, when c has them), and that its entries
// are exactly the checkpoint's, each at its position with its leaf
// recomputed from its fields and its proof leading to the root, in
// (transaction id, id) order inside the range. It returns the first
// problem.
func VerifyExport(r io.Reader, c ExportCheck) (Export, error) {
	var x Export
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&x); err != nil {
		return x, fmt.Errorf("read the export: %w", err)
	}
	cp := x.Checkpoint
	if x.Format != ExportFormat {
		return x, fmt.Errorf("format %q is not %q", x.Format, ExportFormat)
	}
	if len(cp.Root) != merkle.Size || len(cp.PrevHash) != merkle.Size || len(cp.Hash) != merkle.Size {
		return x, fmt.Errorf("checkpoint %d: root, prev_hash and hash must be 32 bytes each", cp.Seq)
	}
	if h := cp.ComputeHash(); !bytes.Equal(h[:], cp.Hash) {
		return x, fmt.Errorf("checkpoint %d: its fields hash to %x, not to its hash %x", cp.Seq, h, []byte(cp.Hash))
	}
	if c.Root != nil && !bytes.Equal(c.Root, cp.Root) {
		return x, fmt.Errorf("checkpoint %d: its root %x is not the published root %x", cp.Seq, []byte(cp.Root), c.Root)
	}
	if c.Hash != nil && !bytes.Equal(c.Hash, cp.Hash) {
		return x, fmt.Errorf("checkpoint %d: its hash %x is not the published hash %x", cp.Seq, []byte(cp.Hash), c.Hash)
	}
	if c.PublicKey != nil {
		if cp.Signature == nil {
			return x, fmt.Errorf("checkpoint %d is not signed", cp.Seq)
		}
		if !cp.VerifySignature(c.PublicKey) {
			return x, fmt.Errorf("checkpoint %d: its signature is not the public key's signature of its hash", cp.Seq)
		}
	}
	if int64(len(x.Entries)) != cp.EntryCount {
		return x, fmt.Errorf("checkpoint %d sealed %d entries; the export has %d", cp.Seq, cp.EntryCount, len(x.Entries))
	}
	var root merkle.Hash
	copy(root[:], cp.Root)
	for i, ee := range x.Entries {
		e := ee.Entry
		if ee.Position != i {
			return x, fmt.Errorf("entry %d: position %d where %d belongs", e.ID, ee.Position, i)
		}
		if e.XactID < cp.XidFrom || e.XactID >= cp.XidTo {
			return x, fmt.Errorf("entry %d: transaction id %d is outside the checkpoint's range [%d, %d)", e.ID, e.XactID, cp.XidFrom, cp.XidTo)
		}
		if i > 0 {
			p := x.Entries[i-1].Entry
			if e.XactID < p.XactID || (e.XactID == p.XactID && e.ID <= p.ID) {
				return x, fmt.Errorf("entry %d: out of (transaction id, id) order after entry %d", e.ID, p.ID)
			}
		}
		leaf := e.Leaf()
		if !bytes.Equal(leaf[:], ee.Leaf) {
			return x, fmt.Errorf("entry %d (position %d): its fields hash to leaf %x, not to the stated leaf %x", e.ID, i, leaf, []byte(ee.Leaf))
		}
		proof := make([]merkle.Hash, len(ee.Proof))
		for k, p := range ee.Proof {
			if len(p) != merkle.Size {
				return x, fmt.Errorf("entry %d (position %d): proof hash %d is not 32 bytes", e.ID, i, k)
			}
			copy(proof[k][:], p)
		}
		if !merkle.Verify(leaf, i, int(cp.EntryCount), proof, root) {
			return x, fmt.Errorf("entry %d (position %d): its proof does not lead to the root %x", e.ID, i, root)
		}
	}
	return x, nil
}
