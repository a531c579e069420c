// Package liabilities owns the proof of liabilities: per asset, a Merkle
// sum tree (platform/sumtree) over every user's obligation (available +
// held) at one consistent snapshot of the ledger, whose root commits to
// the total the service owes its users. The roots are published (GET
// /v1/admin/liabilities and the reconciliation report), and each user can
// be shown a proof that their balance is included (GET
// /v1/users/{external_user_id}/liabilities-proof), which anyone can check
// without the service (svc ledger verify-proof, or the algorithm of
// docs/provable-custody.md).
//
// # Snapshots
//
// A snapshot reads every user account of every asset in one REPEATABLE
// READ transaction: it sees one consistent state of the ledger and blocks
// no writer. Each user (external_user_id) with an account in an asset is
// one leaf with its own 32-byte salt, so the published tree reveals
// neither ids nor balances. The salt is HMAC-SHA-256, keyed by a random
// secret of the snapshot and asset (stored, never published), of the asset
// and the user's id: new for every user, asset and snapshot, and derived
// again when the user asks for a proof. The trees are built and every
// asset's header, leaf id hashes and nodes written in the same
// transaction. The header (liabilities_snapshots, append-only) is written
// by the database function liabilities_record_snapshot (migration 0033),
// the runtime role's only way to write one: it stamps the snapshot with
// the transaction's time and refuses a total that is not the sum of the
// asset's user balances in that snapshot. Readers ignore a snapshot dated
// in the future (believable). Snapshots are taken on demand (svc admin
// liabilities snapshot) and with each hourly reconciliation.
//
// The proof endpoint answers from the latest snapshot of the asset; the
// leaves and nodes of older ones are pruned after ProofRetention.
package liabilities

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"svc/platform/background"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/sumtree"
	"svc/platform/timefmt"
)

// Triggers of a snapshot.
const (
	TriggerHourly   = "hourly"
	TriggerOnDemand = "on_demand"
)

// ProofRetention is how long the leaves and nodes of a snapshot that is no
// longer its asset's latest are kept (its header is kept for ever).
const ProofRetention = 24 * time.Hour

// blockSize is the number of nodes in one liabilities_nodes row, and of
// id hashes in one liabilities_leaves row.
const blockSize = 1024

// nodeSize is one stored node: hash and big-endian sum.
const nodeSize = 40

// Salt derives a user's salt from the snapshot's secret key:
// HMAC-SHA-256(key, u8(len(asset)) || asset || external_user_id).
func Salt(key [32]byte, asset, user string) [sumtree.SaltSize]byte {
	return newSalter(key, asset).salt(user)
}

// salter derives the salts of one asset's users; one per goroutine.
type salter struct {
	mac    hash.Hash
	prefix []byte
}

func newSalter(key [32]byte, asset string) *salter {
	return &salter{mac: hmac.New(sha256.New, key[:]), prefix: append([]byte{byte(len(asset))}, asset...)}
}

func (s *salter) salt(user string) (salt [sumtree.SaltSize]byte) {
	s.mac.Reset()
	s.mac.Write(s.prefix)
	s.mac.Write([]byte(user))
	s.mac.Sum(salt[:0])
	return salt
}

// Service takes snapshots and answers proofs.
type Service struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger
	// Nice is the scheduling priority of the thread that reads, hashes
	// and stores a snapshot (platform/background): 0 is a goroutine like
	// any other; the service takes its snapshots at background.Nice, the
	// lowest, so that they take the CPU the writers leave.
	Nice int
	// Workers bounds the goroutines that hash the trees: 0 is one per
	// CPU; the service uses 1, so a snapshot never takes more than one
	// core from the writers (and all of it runs at Nice).
	Workers int
}

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Published is one asset's snapshot: what is published of it.
type Published struct {
	ID          int64
	Asset       string
	TakenAt     time.Time
	Trigger     string
	RequestedBy *string
	Users       int64
	Root        sumtree.Hash
	Total       int64
}

// tree is one asset's tree while it is built.
type tree struct {
	asset    string
	users    []string
	balances []int64
	key      [32]byte
	ids      []sumtree.Hash // in leaf order
	tree     *sumtree.Tree
}

// Snapshot takes a snapshot of every asset, stores it and returns what it
// publishes, by asset code. requestedBy is "" for the hourly job.
func (s *Service) Snapshot(ctx context.Context, trigger, requestedBy string) ([]Published, error) {
	var out []Published
	// One repeatable-read transaction reads the balances, and publishes
	// the trees built from them: the database stamps each snapshot and
	// checks its total against the balances of that same snapshot
	// (liabilities_record_snapshot, migration 0033).
	err := background.Run(s.Nice, func() error {
		return pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			trees, err := s.read(ctx, tx)
			if err != nil {
				return fmt.Errorf("liabilities: read the ledger: %w", err)
			}
			if err := buildAll(trees, s.Workers); err != nil {
				return err
			}
			out, err = s.store(ctx, tx, trigger, requestedBy, trees)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if err := s.prune(ctx); err != nil {
		// The snapshot is stored; old proof material stays until the next.
		s.log().WarnContext(ctx, "liabilities: pruning old snapshots failed", "error", err)
	}
	return out, nil
}

// read loads every user's available + held per asset from tx's snapshot.
func (s *Service) read(ctx context.Context, tx pgx.Tx) ([]*tree, error) {
	var trees []*tree
	err := func() error {
		// One server process reads, without parallel workers (whose CPU
		// the writers need more), and without compiling the statement
		// (JIT costs more here than it saves). SET takes no snapshot.
		if _, err := tx.Exec(ctx, db.SerialReadSettings); err != nil {
			return err
		}
		// The first query takes the transaction's snapshot.
		rows, err := tx.Query(ctx, `SELECT asset FROM assets ORDER BY asset`)
		if err != nil {
			return err
		}
		byAsset := map[string]*tree{}
		var code string
		if _, err := pgx.ForEachRow(rows, []any{&code}, func() error {
			t := &tree{asset: code}
			trees = append(trees, t)
			byAsset[code] = t
			return nil
		}); err != nil {
			return err
		}
		// Every user account as it is, summed here: PostgreSQL grouping a
		// million owners costs more than sending the two million rows
		// (docs/performance.md). The owner is copied once per user.
		rows, err = tx.Query(ctx, `SELECT asset, owner, balance FROM ledger_accounts WHERE kind IN ('user_available', 'user_hold')`)
		if err != nil {
			return err
		}
		defer rows.Close()
		index := map[string]map[string]int{}
		for _, t := range trees {
			index[t.asset] = map[string]int{}
		}
		for rows.Next() {
			raw := rows.RawValues()
			binaryBalance := rows.FieldDescriptions()[2].Format == pgx.BinaryFormatCode
			t := byAsset[string(raw[0])]
			if t == nil {
				return fmt.Errorf("an account of asset %q, which the assets table does not have", raw[0])
			}
			var balance int64
			if binaryBalance && len(raw[2]) == 8 {
				balance = int64(binary.BigEndian.Uint64(raw[2]))
			} else if balance, err = strconv.ParseInt(string(raw[2]), 10, 64); err != nil {
				return fmt.Errorf("a balance of %q: %w", raw[2], err)
			}
			if balance < 0 {
				return fmt.Errorf("%s: the balance of %q is negative (%d): the ledger refuses that; run svc admin ledger check", t.asset, raw[1], balance)
			}
			users := index[t.asset]
			i, seen := users[string(raw[1])]
			if !seen {
				owner := string(raw[1])
				i = len(t.users)
				users[owner] = i
				t.users = append(t.users, owner)
				t.balances = append(t.balances, 0)
			}
			if t.balances[i] > sumtree.MaxSum-balance {
				return fmt.Errorf("%s: the balance of %q overflows", t.asset, raw[1])
			}
			t.balances[i] += balance
		}
		return rows.Err()
	}()
	return trees, err
}

// buildAll salts, hashes, orders and builds every asset's tree, with at
// most workers goroutines (0: one per CPU).
func buildAll(trees []*tree, workers int) error {
	for _, t := range trees {
		n := len(t.users)
		if _, err := rand.Read(t.key[:]); err != nil {
			return fmt.Errorf("liabilities: salt key: %w", err)
		}
		ids := make([]sumtree.Hash, n)
		if err := parallelRange(n, workers, func(lo, hi int) error {
			salts := newSalter(t.key, t.asset)
			for i := lo; i < hi; i++ {
				h, err := sumtree.IDHash(salts.salt(t.users[i]), t.asset, t.users[i])
				if err != nil {
					return err
				}
				ids[i] = h
			}
			return nil
		}); err != nil {
			return fmt.Errorf("liabilities: %s: %w", t.asset, err)
		}
		sumtree.SortLeaves(ids, t.balances)
		for i := 1; i < n; i++ {
			if ids[i] == ids[i-1] {
				return fmt.Errorf("liabilities: %s: two users with one id hash", t.asset)
			}
		}
		t.ids, t.users = ids, nil
		leaves := make([]sumtree.Node, n)
		if err := parallel(n, workers, func(i int) error {
			l, err := sumtree.Leaf(ids[i], uint64(t.balances[i]))
			leaves[i] = l
			return err
		}); err != nil {
			return fmt.Errorf("liabilities: %s: %w", t.asset, err)
		}
		tr, err := sumtree.Build(leaves)
		if err != nil {
			return fmt.Errorf("liabilities: %s: %w", t.asset, err)
		}
		t.tree = tr
	}
	return nil
}

// parallel runs fn for 0..n-1 on at most workers goroutines (0: one per
// CPU).
func parallel(n, workers int, fn func(i int) error) error {
	return parallelRange(n, workers, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// parallelRange splits 0..n-1 into one range per worker (0: per CPU) and
// runs fn on each. With one worker, fn runs in the caller's goroutine
// (and on its thread, whatever its priority).
func parallelRange(n, workers int, fn func(lo, hi int) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, max(1, n/4096))
	if workers == 1 {
		return fn(0, n)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	chunk := (n + workers - 1) / max(workers, 1)
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min(n, (w+1)*chunk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(lo, hi); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// store writes every asset's header (through liabilities_record_snapshot,
// which stamps it with the transaction's time and checks its total), leaves
// and nodes, in tx: the transaction the balances were read in.
func (s *Service) store(ctx context.Context, tx pgx.Tx, trigger, requestedBy string, trees []*tree) ([]Published, error) {
	var by *string
	if requestedBy != "" {
		by = &requestedBy
	}
	var out []Published
	err := func() error {
		for _, t := range trees {
			root := t.tree.Root()
			p := Published{Asset: t.asset, Trigger: trigger, RequestedBy: by, Users: int64(len(t.ids)),
				Root: root.Hash, Total: int64(root.Sum)}
			if err := tx.QueryRow(ctx, `SELECT id, taken_at FROM liabilities_record_snapshot($1, $2, $3, $4, $5, $6, $7)`,
				p.Asset, p.Trigger, p.RequestedBy, p.Users, t.key[:], root.Hash[:], p.Total).Scan(&p.ID, &p.TakenAt); err != nil {
				return fmt.Errorf("%s: store the snapshot: %w", t.asset, err)
			}
			p.TakenAt = p.TakenAt.UTC()
			block := 0
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"liabilities_leaves"}, []string{"snapshot_id", "block", "first_id", "id_hashes"},
				pgx.CopyFromFunc(func() ([]any, error) {
					if block*blockSize >= len(t.ids) {
						return nil, nil
					}
					ids := t.ids[block*blockSize : min(len(t.ids), (block+1)*blockSize)]
					buf := make([]byte, 0, len(ids)*len(ids[0]))
					for _, id := range ids {
						buf = append(buf, id[:]...)
					}
					row := []any{p.ID, int32(block), ids[0][:], buf}
					block++
					return row, nil
				})); err != nil {
				return fmt.Errorf("%s: store the leaves: %w", t.asset, err)
			}
			level := 0
			block = 0
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"liabilities_nodes"}, []string{"snapshot_id", "level", "block", "nodes"},
				pgx.CopyFromFunc(func() ([]any, error) {
					for level < len(t.tree.Levels) && block*blockSize >= len(t.tree.Levels[level]) {
						level, block = level+1, 0
					}
					if level == len(t.tree.Levels) {
						return nil, nil
					}
					nodes := t.tree.Levels[level][block*blockSize : min(len(t.tree.Levels[level]), (block+1)*blockSize)]
					row := []any{p.ID, int16(level), int32(block), encodeNodes(nodes)}
					block++
					return row, nil
				})); err != nil {
				return fmt.Errorf("%s: store the nodes: %w", t.asset, err)
			}
			out = append(out, p)
		}
		return nil
	}()
	if err != nil {
		return nil, fmt.Errorf("liabilities: %w", err)
	}
	return out, nil
}

func encodeNodes(nodes []sumtree.Node) []byte {
	b := make([]byte, 0, len(nodes)*nodeSize)
	for _, n := range nodes {
		b = append(b, n.Hash[:]...)
		b = append(b, byte(n.Sum>>56), byte(n.Sum>>48), byte(n.Sum>>40), byte(n.Sum>>32),
			byte(n.Sum>>24), byte(n.Sum>>16), byte(n.Sum>>8), byte(n.Sum))
	}
	return b
}

func decodeNode(b []byte, i int) (sumtree.Node, error) {
	if (i+1)*nodeSize > len(b) {
		return sumtree.Node{}, fmt.Errorf("node %d is beyond its block of %d bytes", i, len(b))
	}
	var n sumtree.Node
	copy(n.Hash[:], b[i*nodeSize:])
	for _, c := range b[i*nodeSize+32 : (i+1)*nodeSize] {
		n.Sum = n.Sum<<8 | uint64(c)
	}
	return n, nil
}

// prune deletes the leaves and nodes of snapshots older than
// ProofRetention, except each asset's latest.
func (s *Service) prune(ctx context.Context) error {
	const old = `SELECT s.id FROM liabilities_snapshots s
 WHERE s.created_at < now() - make_interval(secs => $1)
   AND s.id NOT IN (SELECT DISTINCT ON (asset) id FROM liabilities_snapshots WHERE ` + believable + ` ORDER BY asset, taken_at DESC, id DESC)`
	return pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		secs := ProofRetention.Seconds()
		if _, err := tx.Exec(ctx, `DELETE FROM liabilities_leaves WHERE snapshot_id IN (`+old+`)`, secs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM liabilities_nodes WHERE snapshot_id IN (`+old+`)`, secs)
		return err
	})
}

const publishedColumns = `id, asset, taken_at, trigger, requested_by, users, root, total`

func scanPublished(row pgx.Row, more ...any) (Published, error) {
	var (
		p    Published
		root []byte
	)
	if err := row.Scan(append([]any{&p.ID, &p.Asset, &p.TakenAt, &p.Trigger, &p.RequestedBy, &p.Users, &root, &p.Total}, more...)...); err != nil {
		return Published{}, err
	}
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
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT ON (asset) `+publishedColumns+` FROM liabilities_snapshots WHERE `+believable+`
 ORDER BY asset, taken_at DESC, id DESC`)
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
	rows, err := s.Pool.Query(ctx, `SELECT `+publishedColumns+` FROM liabilities_snapshots WHERE NOT (`+believable+`)
 ORDER BY taken_at DESC, id DESC LIMIT 100`)
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

// Proof returns the proof of a user's balance in the latest snapshot of an
// asset that exists (the caller checks that). The proof is verified before
// it is returned: stored material that was changed is an error, never a
// proof that does not verify.
func (s *Service) Proof(ctx context.Context, code, user string) (sumtree.Proof, error) {
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
		snap, err = scanPublished(tx.QueryRow(ctx, `SELECT `+publishedColumns+`, salt_key FROM liabilities_snapshots WHERE asset = $1
   AND `+believable+` ORDER BY taken_at DESC, id DESC LIMIT 1`, code), &keyRaw)
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
			return ErrNotInSnapshot
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
			return ErrNotInSnapshot
		}
		position := int(first)*blockSize + k
		counts := sumtree.Counts(int(snap.Users))
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
		return sumtree.Proof{}, fmt.Errorf("liabilities: proof of %s in %s: %w", user, code, err)
	}
	if _, err := sumtree.Verify(proof); err != nil {
		s.log().ErrorContext(ctx, "liabilities: a stored snapshot yields a proof that does not verify", "snapshot_id", snap.ID, "asset", code, "error", err)
		return sumtree.Proof{}, fmt.Errorf("liabilities: snapshot %d of %s: the stored tree does not match its published root: %w", snap.ID, code, err)
	}
	return proof, nil
}
