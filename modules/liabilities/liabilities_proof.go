package liabilities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"svc/modules/ledger"
	"svc/platform/fault"
	"svc/platform/sumtree"
	"svc/platform/timefmt"
)

// publishedColumns are a snapshot's header, from liabilities_snapshots
// as s, and its number of leaves (leavesColumn).
var publishedColumns = `s.id, s.asset, s.taken_at, s.trigger, s.requested_by, s.users, s.root, s.total, ` + leavesColumn

// leavesColumn is the number of leaves of the snapshot s, read from its
// stored id hashes: the last block's number and length (one index
// lookup; the length of a bytea stored EXTERNAL is read from its header).
// The header's users count the users alone; the other leaves are the
// platform accounts'. A snapshot whose leaves were pruned has 0 (only its
// header is read then, never a proof).
var leavesColumn = `coalesce((SELECT l.block::bigint * ` + strconv.Itoa(blockSize) + ` + length(l.id_hashes) / 32 FROM liabilities_leaves l
  WHERE l.snapshot_id = s.id ORDER BY l.first_id DESC LIMIT 1), 0)`

func scanPublished(row pgx.Row, more ...any) (Published, error) {
	var (
		p      Published
		root   []byte
		leaves int64
	)
	if err := row.Scan(append([]any{&p.ID, &p.Asset, &p.TakenAt, &p.Trigger, &p.RequestedBy, &p.Users, &root, &p.Total, &leaves}, more...)...); err != nil {
		return Published{}, err
	}
	p.PlatformAccounts = max(0, leaves-p.Users)
	if len(root) != len(p.Root) {
		return Published{}, fmt.Errorf("liabilities: snapshot %d: a root of %d bytes", p.ID, len(root))
	}
	copy(p.Root[:], root)
	p.TakenAt = p.TakenAt.UTC()
	return p, nil
}

// believable is the condition on a published snapshot (migration 0033):
// it is not dated ahead of the database's clock (a minute of leeway). The
// database stamps every snapshot with its transaction's time
// (liabilities_record_snapshot); a row dated later was not written so, and
// is ignored (and logged) by every reader, so that it can never become the
// published one.
const believable = `taken_at <= now() + interval '1 minute'`

// Latest returns each asset's latest snapshot, by asset code. A snapshot
// dated in the future is ignored, and logged.
func (s *Service) Latest(ctx context.Context) ([]Published, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+publishedColumns+` FROM (SELECT DISTINCT ON (asset) * FROM liabilities_snapshots WHERE `+believable+`
 ORDER BY asset, taken_at DESC, id DESC) s ORDER BY s.asset`)
	if err != nil {
		return nil, fmt.Errorf("liabilities: read the latest snapshots: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Published, error) { return scanPublished(r) })
	if err != nil {
		return nil, fmt.Errorf("liabilities: read the latest snapshots: %w", err)
	}
	if _, err := s.Ignored(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// Ignored lists, and logs, the snapshots every reader ignores because
// they are dated in the future (believable).
func (s *Service) Ignored(ctx context.Context) ([]Published, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+publishedColumns+` FROM liabilities_snapshots s WHERE NOT (`+believable+`)
 ORDER BY s.taken_at DESC, s.id DESC LIMIT 100`)
	if err != nil {
		return nil, fmt.Errorf("liabilities: read the snapshots dated in the future: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Published, error) { return scanPublished(r) })
	if err != nil {
		return nil, fmt.Errorf("liabilities: read the snapshots dated in the future: %w", err)
	}
	for _, p := range out {
		s.log().ErrorContext(ctx, "liabilities: a snapshot dated in the future is ignored; the service never writes one",
			"snapshot_id", p.ID, "asset", p.Asset, "taken_at", timefmt.Format(p.TakenAt))
	}
	return out, nil
}

// ErrNoSnapshot: the asset has no snapshot yet.
func errNoSnapshot(code string) error {
	return fault.New(fault.NotFound, fmt.Sprintf("no liabilities snapshot of %s yet", code))
}

// ErrNotInSnapshot: the user had no account in the asset at the snapshot.
var ErrNotInSnapshot = fault.New(fault.NotFound, "the user has no account of this asset in its latest liabilities snapshot")

// ErrPlatformNotInSnapshot: the platform account had no account in the
// asset at the snapshot.
var ErrPlatformNotInSnapshot = fault.New(fault.NotFound, "the platform account has no account of this asset in its latest liabilities snapshot")

// Proof returns the proof of a user's balance in the latest snapshot of an
// asset that exists (the caller checks that). The proof is verified before
// it is returned: stored material that was changed is an error, never a
// proof that does not verify.
func (s *Service) Proof(ctx context.Context, code, user string) (sumtree.Proof, error) {
	return s.HolderProof(ctx, code, ledger.UserHolder(user))
}

// PlatformProof is Proof for a platform account: its leaf, salted and
// hashed with its PlatformIdentity, in the document that names it.
func (s *Service) PlatformProof(ctx context.Context, code, name string) (PlatformAccountProof, error) {
	p, err := s.HolderProof(ctx, code, ledger.PlatformHolder(name))
	if err != nil {
		return PlatformAccountProof{}, err
	}
	return platformAccountProof(p, name), nil
}

// HolderProof returns the proof of a user's or a platform account's leaf
// as sumtree verifies it: its ExternalUserID is the leaf's Identity (for a
// platform account, bytes that are not UTF-8 and so not for a JSON
// document: PlatformProof renders that one).
func (s *Service) HolderProof(ctx context.Context, code string, holder ledger.Holder) (sumtree.Proof, error) {
	user := Identity(holder)
	notIn := ErrNotInSnapshot
	if holder.Platform {
		notIn = ErrPlatformNotInSnapshot
	}
	var (
		snap  Published
		proof sumtree.Proof
	)
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var (
			key    [32]byte
			keyRaw []byte
		)
		var err error
		snap, err = scanPublished(tx.QueryRow(ctx, `SELECT `+publishedColumns+`, s.salt_key FROM liabilities_snapshots s WHERE s.asset = $1
   AND `+believable+` ORDER BY s.taken_at DESC, s.id DESC LIMIT 1`, code), &keyRaw)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoSnapshot(code)
		}
		if err != nil {
			return err
		}
		copy(key[:], keyRaw)
		salt := Salt(key, code, user)
		id, err := sumtree.IDHash(salt, code, user)
		if err != nil {
			return err
		}
		// The block the id hash would be in, and its place there.
		var (
			first int32
			ids   []byte
		)
		err = tx.QueryRow(ctx, `SELECT block, id_hashes FROM liabilities_leaves WHERE snapshot_id = $1 AND first_id <= $2
 ORDER BY first_id DESC LIMIT 1`, snap.ID, id[:]).Scan(&first, &ids)
		if errors.Is(err, pgx.ErrNoRows) {
			return notIn
		}
		if err != nil {
			return err
		}
		n := len(ids) / len(id)
		k, found := 0, false
		lo, hi := 0, n
		for lo < hi {
			mid := (lo + hi) / 2
			switch c := bytes.Compare(ids[mid*len(id):(mid+1)*len(id)], id[:]); {
			case c == 0:
				k, found, lo = mid, true, hi
			case c < 0:
				lo = mid + 1
			default:
				hi = mid
			}
		}
		if !found {
			return notIn
		}
		position := int(first)*blockSize + k
		counts := sumtree.Counts(int(snap.Users + snap.PlatformAccounts))
		if position >= counts[0] {
			return fmt.Errorf("snapshot %d: leaf %d of %d", snap.ID, position, counts[0])
		}
		// The blocks the path reads: the leaf's own, and each sibling's.
		var levels []int16
		var blocks []int32
		i := position
		levels, blocks = append(levels, 0), append(blocks, int32(i/blockSize))
		for l := 0; l+1 < len(counts); l++ {
			if sib := i ^ 1; sib < counts[l] {
				levels, blocks = append(levels, int16(l)), append(blocks, int32(sib/blockSize))
			}
			i /= 2
		}
		rows, err := tx.Query(ctx, `SELECT level, block, nodes FROM liabilities_nodes WHERE snapshot_id = $1
   AND (level, block) IN (SELECT * FROM unnest($2::smallint[], $3::integer[]))`, snap.ID, levels, blocks)
		if err != nil {
			return err
		}
		type blockKey struct{ level, block int }
		got := map[blockKey][]byte{}
		var (
			level int16
			block int32
			nodes []byte
		)
		if _, err := pgx.ForEachRow(rows, []any{&level, &block, &nodes}, func() error {
			got[blockKey{int(level), int(block)}] = append([]byte(nil), nodes...)
			return nil
		}); err != nil {
			return err
		}
		at := func(level, index int) (sumtree.Node, error) {
			b, ok := got[blockKey{level, index / blockSize}]
			if !ok {
				return sumtree.Node{}, fmt.Errorf("level %d block %d is missing", level, index/blockSize)
			}
			return decodeNode(b, index%blockSize)
		}
		path, err := sumtree.PathOf(position, counts, at)
		if err != nil {
			return err
		}
		leaf, err := at(0, position)
		if err != nil {
			return err
		}
		// The leaf as stored, with the balance its sum says: Verify below
		// checks that its hash commits to that balance and this user.
		proof = sumtree.NewProof(code, snap.ID, timefmt.Format(snap.TakenAt), user, salt, id, leaf, path,
			sumtree.Node{Hash: snap.Root, Sum: uint64(snap.Total)})
		return nil
	})
	if err != nil {
		var f *fault.Error
		if errors.As(err, &f) {
			return sumtree.Proof{}, err
		}
		return sumtree.Proof{}, fmt.Errorf("liabilities: proof of %s in %s: %w", holder, code, err)
	}
	if _, err := sumtree.Verify(proof); err != nil {
		s.log().ErrorContext(ctx, "liabilities: a stored snapshot yields a proof that does not verify", "snapshot_id", snap.ID, "asset", code, "error", err)
		return sumtree.Proof{}, fmt.Errorf("liabilities: snapshot %d of %s: the stored tree does not match its published root: %w", snap.ID, code, err)
	}
	return proof, nil
}
