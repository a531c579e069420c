package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/db"
	"svc/platform/money"
)

// Balance is a holder's balance in one asset, in smallest units.
type Balance struct {
	Asset     string // the asset's code
	Decimals  int    // the asset's decimals
	Available int64
	Held      int64 // reserved by open withdrawals
	Reserved  int64 // reserved by open escrow holds
}

// Format renders smallest units of the balance's asset as a decimal string.
func (b Balance) Format(units int64) string { return money.Format(units, b.Decimals) }

// Total is available plus held plus reserved.
func (b Balance) Total() int64 { return b.Available + b.Held + b.Reserved }

// Balances returns the user's balances, by asset code, in every enabled
// asset and in every asset the user has an account in, enabled or not: an
// asset turned off (discovery found no payment method for it, an operator
// is reconfiguring the store) stops taking deposits, but the money in it
// is still the user's and never disappears from the answer. A user the
// ledger has never seen has zeros in the enabled assets. They are the
// materialized balances, which the same statement as every posting keeps
// equal to the postings.
//
// One statement with a real parameter reads the assets and the user's
// accounts together: a balance read is the most frequent request, and it
// is one round trip to the database and one prepared plan.
func Balances(ctx context.Context, idb bun.IDB, externalUserID string) ([]Balance, error) {
	return HolderBalances(ctx, idb, UserHolder(externalUserID))
}

// The balance reads of a user and of a platform account: one constant
// statement each, so that each keeps its prepared plan.
var balancesSQL = map[bool]string{false: balancesOf(UserHolder("")), true: balancesOf(PlatformHolder(""))}

func balancesOf(h Holder) string {
	k := h.kinds()
	if h.Platform {
		// $1 is every shard's owner (ShardOwners): the available balance
		// is their sum.
		return fmt.Sprintf(`
SELECT a.asset, a.decimals, a.enabled, b.kind, coalesce(b.balance, 0)
  FROM assets a
  LEFT JOIN (SELECT asset, kind, sum(balance)::bigint AS balance FROM ledger_accounts
              WHERE owner = ANY($1::text[]) AND kind IN ('%s', '%s', '%s')
              GROUP BY asset, kind) b ON b.asset = a.asset
 ORDER BY a.asset`, k[0], k[1], k[2])
	}
	return fmt.Sprintf(`
SELECT a.asset, a.decimals, a.enabled, b.kind, coalesce(b.balance, 0)
  FROM assets a
  LEFT JOIN ledger_accounts b ON b.owner = $1 AND b.asset = a.asset AND b.kind IN ('%s', '%s', '%s')
 ORDER BY a.asset`, k[0], k[1], k[2])
}

// ownerArg is the owner parameter of a holder's reads: a user's id, or
// every owner of a platform account's shards.
func ownerArg(h Holder) any {
	if h.Platform {
		return ShardOwners(h.ID)
	}
	return h.ID
}

// HolderBalances is Balances for a user or a platform account: Held is
// the hold account (open withdrawals), Reserved the escrow account (open
// escrow holds).
func HolderBalances(ctx context.Context, idb bun.IDB, h Holder) ([]Balance, error) {
	q, err := sqlOf(idb)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, balancesSQL[h.Platform], ownerArg(h))
	if err != nil {
		return nil, fmt.Errorf("ledger: balances: %w", err)
	}
	defer rows.Close()
	var out []Balance
	for rows.Next() {
		var (
			b       Balance
			enabled bool
			kind    sql.NullString
			bal     int64
		)
		if err := rows.Scan(&b.Asset, &b.Decimals, &enabled, &kind, &bal); err != nil {
			return nil, fmt.Errorf("ledger: balances: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].Asset != b.Asset {
			if !enabled && !kind.Valid {
				continue // off, and the user has no account in it
			}
			out = append(out, b)
		}
		last := &out[len(out)-1]
		switch AccountKind(kind.String) {
		case UserAvailable, PlatformAvailable:
			last.Available = bal
		case UserHold, PlatformHold:
			last.Held = bal
		case UserEscrow, PlatformEscrow:
			last.Reserved = bal
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: balances: %w", err)
	}
	return out, nil
}

// Transaction page sizes.
const (
	DefaultTransactionsLimit = 50
	MaxTransactionsLimit     = 200
)

// TransactionsQuery selects one page of a user's or a platform account's
// history.
type TransactionsQuery struct {
	ExternalUserID string // the user, or the platform account's name when Platform
	Platform       bool
	Asset          string // optional; unknown: asset.ErrUnknown
	Cursor         int64  // 0 for the newest; otherwise postings with smaller ids
	Limit          int    // 1 to MaxTransactionsLimit; 0 means DefaultTransactionsLimit
}

// Transaction is one posting on a user's or a platform account's account.
type Transaction struct {
	PostingID int64
	EntryID   int64
	Kind      EntryKind
	Asset     string
	Account   AccountKind // one of the holder's three kinds (Holder)
	Amount    int64       // signed: positive is a credit to the user
	SourceRef string
	Memo      string
	CreatedAt time.Time
}

// Transactions returns a page of the holder's postings (its available,
// hold and escrow accounts), newest first, and the cursor of the next page (nil on the
// last). Pages are keyset on posting id, so postings added later never
// shift a page that was already read.
func Transactions(ctx context.Context, idb bun.IDB, tq TransactionsQuery) ([]Transaction, *int64, error) {
	if tq.Limit == 0 {
		tq.Limit = DefaultTransactionsLimit
	}
	if tq.Limit < 1 || tq.Limit > MaxTransactionsLimit {
		return nil, nil, fmt.Errorf("ledger: transactions: limit %d outside 1..%d", tq.Limit, MaxTransactionsLimit)
	}
	cursor := tq.Cursor
	if cursor <= 0 {
		cursor = math.MaxInt64
	}
	if tq.Asset != "" {
		if _, err := (&asset.Store{DB: idb}).Get(ctx, tq.Asset); err != nil {
			return nil, nil, err
		}
	}
	q, err := sqlOf(idb)
	if err != nil {
		return nil, nil, err
	}
	// Per account (at most two per asset) the newest postings below the
	// cursor from the (account_id, id) index, then the merge: the cost is
	// the page size, not the user's history. A user posting carries its
	// entry's kind, source_ref, memo and created_at (migration 0025, which
	// the posting trigger and the ledger checks hold equal to the entry's),
	// and the entry's asset is the account's, so the page reads one heap
	// row per posting and no entry.
	//
	// In two steps: b is the id of the oldest posting the page can hold
	// on the account, read from the index alone; p then reads the rows
	// from there to the cursor. The planner estimates an account's
	// postings from the average account, a few dozen, and with a single
	// step it chose, for a deep page of a user with thousands of postings,
	// a bitmap scan of every posting below the cursor (856 heap pages for
	// one page of 51 at a million postings) over the ordered index scan
	// that stops at the page's end. Bounded by b, either plan reads at
	// most one page of rows.
	rows, err := q.QueryContext(ctx, transactionsSQL[tq.Platform], ownerArg(Holder{Platform: tq.Platform, ID: tq.ExternalUserID}), tq.Asset, cursor, tq.Limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: transactions: %w", err)
	}
	defer rows.Close()
	var out []Transaction
	for rows.Next() {
		var t Transaction
		if err := rows.Scan(&t.PostingID, &t.EntryID, &t.Kind, &t.Asset, &t.Account, &t.Amount, &t.SourceRef, &t.Memo, &t.CreatedAt); err != nil {
			return nil, nil, fmt.Errorf("ledger: transactions: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("ledger: transactions: %w", err)
	}
	out, next := db.Page(out, tq.Limit, func(t Transaction) int64 { return t.PostingID })
	return out, next, nil
}

// The history reads of a user and of a platform account.
var transactionsSQL = map[bool]string{false: transactionsOf(UserHolder("")), true: transactionsOf(PlatformHolder(""))}

func transactionsOf(h Holder) string {
	k := h.kinds()
	// A platform account's: every shard's postings ($1 is ShardOwners)
	// but the sweeps', which move money between its own shards.
	owner, notSweep := "acc.owner = $1", ""
	if h.Platform {
		owner, notSweep = "acc.owner = ANY($1::text[])", " AND entry_kind <> 'shard_sweep'"
	}
	return fmt.Sprintf(`
SELECT p.id, p.entry_id, p.entry_kind, acc.asset, acc.kind, p.amount, p.entry_ref, coalesce(p.entry_memo, ''), p.entry_at
  FROM ledger_accounts acc
 CROSS JOIN LATERAL (
        SELECT min(id) AS low FROM (
               SELECT id FROM ledger_postings
                WHERE account_id = acc.id AND id < $3%[4]s
                ORDER BY id DESC LIMIT $4) k) b
 CROSS JOIN LATERAL (
        SELECT id, entry_id, amount, entry_kind, entry_ref, entry_memo, entry_at FROM ledger_postings
         WHERE account_id = acc.id AND id < $3 AND id >= b.low%[4]s
         ORDER BY id DESC LIMIT $4) p
 WHERE %[5]s AND acc.kind IN ('%[1]s', '%[2]s', '%[3]s') AND ($2::text = '' OR acc.asset = $2::text)
 ORDER BY p.id DESC
 LIMIT $4`, k[0], k[1], k[2], notSweep, owner)
}

// Totals are one asset's ledger balances in smallest units, each in its
// account's own sense (see the package doc's signs): the system accounts
// derived from their postings, the users' summed from their materialized
// balances. Reconciliation compares them with the chain.
type Totals struct {
	Asset         string
	Custody       int64
	InFlight      int64
	FeeIncome     int64
	NetworkFees   int64
	Suspense      int64
	Transfer      int64 // sent to the pair's other custody less received (BookTransfer)
	UserAvailable int64 // over all users
	UserHold      int64 // over all users
	UserEscrow    int64 // over all users

	PlatformAvailable int64 // over all platform accounts
	PlatformHold      int64 // over all platform accounts
	PlatformEscrow    int64 // over all platform accounts
}

// UserObligations is what the service owes its users in the asset.
func (t Totals) UserObligations() int64 { return t.UserAvailable + t.UserHold + t.UserEscrow }

// PlatformObligations is what the service holds for the platform's own
// accounts in the asset: it owes it as it owes the users.
func (t Totals) PlatformObligations() int64 {
	return t.PlatformAvailable + t.PlatformHold + t.PlatformEscrow
}

// Obligations is everything the service owes in the asset: users and
// platform accounts.
func (t Totals) Obligations() int64 { return t.UserObligations() + t.PlatformObligations() }

// AssetTotals returns Totals for every asset that has ledger accounts, by
// asset code. Each system balance is one index-only sum over its postings.
// The ledger check computes the same from the sums it carries from one
// check to the next (checkTotals).
func AssetTotals(ctx context.Context, idb bun.IDB) ([]Totals, error) {
	q, err := sqlOf(idb)
	if err != nil {
		return nil, err
	}
	var t totalsBuilder
	if err := t.addUsers(ctx, q); err != nil {
		return nil, err
	}
	if err := t.addSums(ctx, q, `
SELECT a.asset, a.kind, (SELECT coalesce(sum(p.amount), 0) FROM ledger_postings p WHERE p.account_id = a.id)::bigint
  FROM ledger_accounts a WHERE a.owner = ''`); err != nil {
		return nil, err
	}
	return t.list(), nil
}

// totalsBuilder collects Totals by asset from sums of postings, each
// account kind's in the accounts' own sense (AccountKind.Natural).
type totalsBuilder map[string]*Totals

// addUsers adds the users' materialized balances, summed by asset and
// kind: one pass over the accounts.
func (t *totalsBuilder) addUsers(ctx context.Context, q db.Querier) error {
	return t.addSums(ctx, q, `SELECT asset, kind, sum(balance)::bigint FROM ledger_accounts WHERE balance IS NOT NULL GROUP BY asset, kind`)
}

// addSums adds the rows (asset, kind, sum) of query.
func (t *totalsBuilder) addSums(ctx context.Context, q db.Querier, query string) error {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return fmt.Errorf("ledger: totals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			code string
			kind AccountKind
			sum  int64
		)
		if err := rows.Scan(&code, &kind, &sum); err != nil {
			return fmt.Errorf("ledger: totals: %w", err)
		}
		t.add(code, kind, sum)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger: totals: %w", err)
	}
	return nil
}

// add adds the sum of postings of accounts of one asset and kind.
func (t *totalsBuilder) add(code string, kind AccountKind, sum int64) {
	if *t == nil {
		*t = totalsBuilder{}
	}
	x := (*t)[code]
	if x == nil {
		x = &Totals{Asset: code}
		(*t)[code] = x
	}
	v := kind.Natural(sum)
	switch kind {
	case UserAvailable:
		x.UserAvailable += v
	case UserHold:
		x.UserHold += v
	case Custody:
		x.Custody += v
	case InFlight:
		x.InFlight += v
	case FeeIncome:
		x.FeeIncome += v
	case NetworkFees:
		x.NetworkFees += v
	case Suspense:
		x.Suspense += v
	case Transfer:
		x.Transfer += v
	case UserEscrow:
		x.UserEscrow += v
	case PlatformAvailable:
		x.PlatformAvailable += v
	case PlatformHold:
		x.PlatformHold += v
	case PlatformEscrow:
		x.PlatformEscrow += v
	}
}

// list returns the Totals by asset code.
func (t totalsBuilder) list() []Totals {
	var out []Totals
	for _, x := range t {
		out = append(out, *x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Asset < out[j].Asset })
	return out
}
