package ledger

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

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

// rangePosting is a posting as read; account indexes rangeReader.accounts.
type rangePosting struct {
	entry, id, accountID, amount, after int64
	account                             int32
	hasAfter                            bool
}

type rangeAccount struct{ asset, kind, owner string }

// rangeEntry is an entry of a range as read, in the server's binary
// format: its byte slices are valid only during the call that receives it.
type rangeEntry struct {
	id        int64
	xact      uint64
	kind      []byte
	asset     []byte
	sourceRef []byte
	memo      []byte // nil: NULL
	createdAt int64  // microseconds since 1970-01-01T00:00:00Z
	postings  []rangePosting
	accounts  []rangeAccount
}

// appendEncoding appends the entry's canonical encoding to dst: the bytes
// of SealedEntry.Encode (docs/checkpoints.md), written from the raw
// values without building a SealedEntry (TestRangeEncodingIsSealedEncoding).
func (e *rangeEntry) appendEncoding(dst []byte) []byte {
	enc := encoder{b: dst}
	entryHead(&enc, e.id, e.xact, e.kind, e.asset, e.sourceRef, e.memo, e.memo != nil, e.createdAt, len(e.postings))
	for _, p := range e.postings {
		a := e.accounts[p.account]
		enc.posting(p.id, p.accountID, a.asset, a.kind, a.owner, p.amount, p.after, p.hasAfter)
	}
	return enc.b
}

// sealed is the entry as a SealedEntry, copied out of the read buffers.
func (e *rangeEntry) sealed() SealedEntry {
	s := SealedEntry{ID: e.id, XactID: e.xact, Kind: string(e.kind), Asset: string(e.asset), SourceRef: string(e.sourceRef),
		CreatedAt: time.UnixMicro(e.createdAt).UTC()}
	if e.memo != nil {
		m := string(e.memo)
		s.Memo = &m
	}
	for _, p := range e.postings {
		a := e.accounts[p.account]
		sp := SealedPosting{ID: p.id, AccountID: p.accountID, AccountAsset: a.asset, AccountKind: a.kind, AccountOwner: a.owner, Amount: p.amount}
		if p.hasAfter {
			v := p.after
			sp.BalanceAfter = &v
		}
		s.Postings = append(s.Postings, sp)
	}
	return s
}

// pgEpochMicros is 2000-01-01T00:00:00Z, PostgreSQL's epoch, in Unix
// microseconds.
const pgEpochMicros = 946_684_800_000_000

// readRange calls fn with every entry whose transaction id is in [from,
// to), in (transaction id, id) order, each with its postings in id order.
// Entries and postings are read as they are, whatever they are: an entry
// that lost its postings, or a posting whose account is gone, is encoded
// as found (so that it fails to match its leaf). fn must not keep e.
func readRange(ctx context.Context, q rangeQuerier, from, to uint64, fn func(e *rangeEntry) error) error {
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
	postings, accountIDs, err := readPostings(ctx, q, *lo, *hi)
	if err != nil {
		return err
	}
	accounts, err := readAccounts(ctx, q, accountIDs)
	if err != nil {
		return err
	}
	rows, err := q.Query(ctx, `SELECT id, created_xact, kind, asset, source_ref, memo, created_at FROM ledger_entries
 WHERE created_xact >= $1 AND created_xact < $2 ORDER BY created_xact, id`, from, to)
	if err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	defer rows.Close()
	if err := requireBinary(rows, 7, 0, 1, 6); err != nil {
		return err
	}
	e := rangeEntry{accounts: accounts}
	next := 0 // where the next entry's postings start when ids ascend
	for rows.Next() {
		v := rows.RawValues()
		if len(v[0]) != 8 || len(v[1]) != 8 || len(v[6]) != 8 || v[2] == nil || v[3] == nil || v[4] == nil {
			return fmt.Errorf("read ledger range: an entry row of unexpected shape")
		}
		e.id = int64(binary.BigEndian.Uint64(v[0]))
		e.xact = binary.BigEndian.Uint64(v[1])
		e.kind, e.asset, e.sourceRef, e.memo = v[2], v[3], v[4], v[5]
		e.createdAt = int64(binary.BigEndian.Uint64(v[6])) + pgEpochMicros
		i := next
		if i >= len(postings) || postings[i].entry != e.id {
			i, _ = slices.BinarySearchFunc(postings, e.id, func(p rangePosting, id int64) int { return cmp.Compare(p.entry, id) })
		}
		j := i
		for j < len(postings) && postings[j].entry == e.id {
			j++
		}
		e.postings, next = postings[i:j], j
		if err := fn(&e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read ledger range: %w", err)
	}
	return nil
}

// requireBinary checks that rows has n columns and that the numeric ones
// (cols) come in the binary format readRange decodes. Text columns are
// the same bytes in either format.
func requireBinary(rows pgx.Rows, n int, cols ...int) error {
	fd := rows.FieldDescriptions()
	if len(fd) != n {
		return fmt.Errorf("read ledger range: %d columns, not %d", len(fd), n)
	}
	for _, c := range cols {
		if fd[c].Format != pgx.BinaryFormatCode {
			return fmt.Errorf("read ledger range: column %s is not in binary format", fd[c].Name)
		}
	}
	return nil
}

// readPostings reads every posting of the entries lo..hi, sorted by (entry
// id, posting id), and the ids of the accounts they name, each once, in
// the order the postings' account indexes refer to.
func readPostings(ctx context.Context, q rangeQuerier, lo, hi int64) ([]rangePosting, []int64, error) {
	rows, err := q.Query(ctx, `SELECT entry_id, id, account_id, amount, balance_after FROM ledger_postings
 WHERE entry_id BETWEEN $1 AND $2`, lo, hi)
	if err != nil {
		return nil, nil, fmt.Errorf("read ledger range postings: %w", err)
	}
	defer rows.Close()
	if err := requireBinary(rows, 5, 0, 1, 2, 3, 4); err != nil {
		return nil, nil, err
	}
	var (
		out   = make([]rangePosting, 0, min(2*(hi-lo+1), 1<<22))
		index = map[int64]int32{}
		ids   []int64
	)
	for rows.Next() {
		v := rows.RawValues()
		if len(v[0]) != 8 || len(v[1]) != 8 || len(v[2]) != 8 || len(v[3]) != 8 || (v[4] != nil && len(v[4]) != 8) {
			return nil, nil, fmt.Errorf("read ledger range postings: a row of unexpected shape")
		}
		p := rangePosting{entry: int64(binary.BigEndian.Uint64(v[0])), id: int64(binary.BigEndian.Uint64(v[1])),
			accountID: int64(binary.BigEndian.Uint64(v[2])), amount: int64(binary.BigEndian.Uint64(v[3]))}
		if v[4] != nil {
			p.after, p.hasAfter = int64(binary.BigEndian.Uint64(v[4])), true
		}
		a, ok := index[p.accountID]
		if !ok {
			a = int32(len(ids))
			index[p.accountID] = a
			ids = append(ids, p.accountID)
		}
		p.account = a
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read ledger range postings: %w", err)
	}
	byEntry := func(a, b rangePosting) int {
		return cmp.Or(cmp.Compare(a.entry, b.entry), cmp.Compare(a.id, b.id))
	}
	if !slices.IsSortedFunc(out, byEntry) {
		slices.SortFunc(out, byEntry)
	}
	return out, ids, nil
}

// readAccounts reads the accounts of ids, in that order. An account that
// is gone is left empty (its postings then fail to match their leaves).
func readAccounts(ctx context.Context, q rangeQuerier, ids []int64) ([]rangeAccount, error) {
	out := make([]rangeAccount, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT i.n, a.asset, a.kind, a.owner FROM unnest($1::bigint[]) WITH ORDINALITY i (id, n)
  JOIN ledger_accounts a ON a.id = i.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("read ledger range accounts: %w", err)
	}
	defer rows.Close()
	var (
		n int64
		a rangeAccount
	)
	for rows.Next() {
		if err := rows.Scan(&n, &a.asset, &a.kind, &a.owner); err != nil {
			return nil, fmt.Errorf("read ledger range accounts: %w", err)
		}
		out[n-1] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ledger range accounts: %w", err)
	}
	return out, nil
}
