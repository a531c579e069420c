package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Reading a range of the ledger for a checkpoint, verify and export.
//
// The obvious statement, the entries joined with their postings and the
// postings' accounts and sorted by (created_xact, id, posting id), costs
// PostgreSQL far more than the rows themselves: over a million entries
// it either sorts two million wide rows on disk (3.5 s, with parallel
// workers and JIT) or looks every posting and account up by index in a
// nested loop (10.6 s); docs/performance.md has the plans. Three
// statements that each read one table through an index, in binary, and a
// join in Go cost a fraction of that:
//
//  1. the lowest and highest entry id of the range (an index-only scan of
//     ledger_entries (created_xact, id));
//  2. every posting whose entry id lies between them (ledger_postings
//     (entry_id)), kept in memory, 40 bytes each, sorted by (entry id,
//     posting id); postings of entries outside the range are ignored;
//  3. the accounts those postings name, by primary key;
//  4. the entries of the range in (created_xact, id) order through the
//     index, each joined in Go with its postings and their accounts.
//
// An entry whose transaction committed late can have an id far below the
// rest of its range; step 2 then reads the postings in between too, once.

// rangeQuerier is what reading a range needs of a pgx transaction.
type rangeQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// rangePosting is a posting as read, before its account is attached.
type rangePosting struct {
	entry, id, account, amount, after int64
	hasAfter                          bool
}

type rangeAccount struct{ asset, kind, owner string }

// readRange calls fn with every entry whose transaction id is in [from,
// to), in (transaction id, id) order, each with its postings in id order.
// Entries and postings are read as they are, whatever they are: an entry
// that lost its postings, or a posting whose account is gone, is encoded
// as found (so that it fails to match its leaf).
func readRange(ctx context.Context, q rangeQuerier, from, to uint64, fn func(SealedEntry) error) error {
	var lo, hi *int64
	// OFFSET 0 keeps the planner from answering min and max by walking the
	// primary key from either end, which crosses the whole ledger.
	if err := q.QueryRow(ctx, `SELECT min(id), max(id) FROM (SELECT id FROM ledger_entries
 WHERE created_xact >= $1 AND created_xact < $2 OFFSET 0) r`, from, to).Scan(&lo, &hi); err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	if lo == nil {
		return nil
	}
	postings, err := readPostings(ctx, q, *lo, *hi)
	if err != nil {
		return err
	}
	accounts, err := readAccounts(ctx, q, postings)
	if err != nil {
		return err
	}
	rows, err := q.Query(ctx, `SELECT id, created_xact, kind, asset, source_ref, memo, created_at FROM ledger_entries
 WHERE created_xact >= $1 AND created_xact < $2 ORDER BY created_xact, id`, from, to)
	if err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e SealedEntry
		if err := rows.Scan(&e.ID, &e.XactID, &e.Kind, &e.Asset, &e.SourceRef, &e.Memo, &e.CreatedAt); err != nil {
			return fmt.Errorf("read ledger range: %w", err)
		}
		e.CreatedAt = e.CreatedAt.UTC()
		i, _ := slices.BinarySearchFunc(postings, e.ID, func(p rangePosting, id int64) int { return cmp.Compare(p.entry, id) })
		j := i
		for j < len(postings) && postings[j].entry == e.ID {
			j++
		}
		if j > i {
			e.Postings = make([]SealedPosting, j-i)
			afters := make([]int64, j-i)
			for k, p := range postings[i:j] {
				a := accounts[p.account]
				sp := SealedPosting{ID: p.id, AccountID: p.account, AccountAsset: a.asset, AccountKind: a.kind,
					AccountOwner: a.owner, Amount: p.amount}
				if p.hasAfter {
					afters[k] = p.after
					sp.BalanceAfter = &afters[k]
				}
				e.Postings[k] = sp
			}
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	return nil
}

// readPostings reads every posting of the entries lo..hi, sorted by (entry
// id, posting id).
func readPostings(ctx context.Context, q rangeQuerier, lo, hi int64) ([]rangePosting, error) {
	rows, err := q.Query(ctx, `SELECT entry_id, id, account_id, amount, balance_after FROM ledger_postings
 WHERE entry_id BETWEEN $1 AND $2`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("read ledger range postings: %w", err)
	}
	defer rows.Close()
	var (
		out   = make([]rangePosting, 0, 2*(hi-lo+1))
		p     rangePosting
		after *int64
	)
	for rows.Next() {
		if err := rows.Scan(&p.entry, &p.id, &p.account, &p.amount, &after); err != nil {
			return nil, fmt.Errorf("read ledger range postings: %w", err)
		}
		p.after, p.hasAfter = 0, after != nil
		if after != nil {
			p.after = *after
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger range postings: %w", err)
	}
	byEntry := func(a, b rangePosting) int {
		return cmp.Or(cmp.Compare(a.entry, b.entry), cmp.Compare(a.id, b.id))
	}
	if !slices.IsSortedFunc(out, byEntry) {
		slices.SortFunc(out, byEntry)
	}
	return out, nil
}

// readAccounts reads the accounts the postings name.
func readAccounts(ctx context.Context, q rangeQuerier, postings []rangePosting) (map[int64]rangeAccount, error) {
	seen := make(map[int64]rangeAccount)
	ids := []int64{}
	for _, p := range postings {
		if _, ok := seen[p.account]; !ok {
			seen[p.account] = rangeAccount{}
			ids = append(ids, p.account)
		}
	}
	if len(ids) == 0 {
		return seen, nil
	}
	rows, err := q.Query(ctx, `SELECT id, asset, kind, owner FROM ledger_accounts WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read ledger range accounts: %w", err)
	}
	defer rows.Close()
	var (
		id int64
		a  rangeAccount
	)
	for rows.Next() {
		if err := rows.Scan(&id, &a.asset, &a.kind, &a.owner); err != nil {
			return nil, fmt.Errorf("read ledger range accounts: %w", err)
		}
		seen[id] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger range accounts: %w", err)
	}
	return seen, nil
}
