package liabilities

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"svc/modules/ledger"
	"svc/platform/background"
	"svc/platform/db"
	"svc/platform/sumtree"
)

// tree is one asset's tree while it is built.
type tree struct {
	asset     string
	users     []string // the leaves' identities (Identity)
	platforms int64    // how many of them are platform accounts
	balances  []int64
	key       [32]byte
	ids       []sumtree.Hash // in leaf order
	tree      *sumtree.Tree
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

// ownedKinds are the account kinds whose balances a snapshot sums: every
// kind with a materialized balance, the same accounts
// liabilities_record_snapshot sums (migration 0038). A kind the database
// adds and this list lacks makes every snapshot fail there, loudly, rather
// than publish a tree without it.
var ownedKinds = kindsWhere(ledger.AccountKind.Materialized)

// platformKinds are those of them a platform account owns.
var platformKinds = kindsWhere(ledger.AccountKind.IsPlatform)

func kindsWhere(f func(ledger.AccountKind) bool) []string {
	var out []string
	for _, k := range ledger.AccountKinds() {
		if f(k) {
			out = append(out, string(k))
		}
	}
	return out
}

// read loads, per asset from tx's snapshot, every user's available + held
// + reserved and every platform account's.
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
		// Every owned account as it is, summed here: PostgreSQL grouping a
		// million owners costs more than sending the two million rows
		// (docs/performance.md). The owner is copied once per leaf. The
		// fourth column tells a platform account's account from a user's.
		rows, err = tx.Query(ctx, `SELECT asset, owner, balance, kind = ANY($2::text[])
  FROM ledger_accounts WHERE kind = ANY($1::text[])`, ownedKinds, platformKinds)
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
			platform := len(raw[3]) == 1 && (raw[3][0] == 1 || raw[3][0] == 't')
			if !platform && len(raw[1]) > 0 && raw[1][0] == platformTag[0] {
				// The ledger and the UTF8 database refuse such an owner.
				return fmt.Errorf("%s: a user id that is not UTF-8 (%q) would take a platform account's identity", t.asset, raw[1])
			}
			users := index[t.asset]
			var (
				i    int
				seen bool
			)
			identity := string(raw[1])
			if platform {
				// A platform account's shards are one leaf: its name's.
				identity = PlatformIdentity(ledger.PlatformName(identity))
			}
			i, seen = users[identity]
			if !seen {
				if platform {
					t.platforms++
				}
				i = len(t.users)
				users[identity] = i
				t.users = append(t.users, identity)
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
				return fmt.Errorf("liabilities: %s: two leaves with one id hash", t.asset)
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
			p := Published{Asset: t.asset, Trigger: trigger, RequestedBy: by, Users: int64(len(t.ids)) - t.platforms,
				PlatformAccounts: t.platforms, Root: root.Hash, Total: int64(root.Sum)}
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
