package ledger

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// Platform account page sizes.
const (
	DefaultPlatformAccountsLimit = 50
	MaxPlatformAccountsLimit     = 200
)

// PlatformAccount is a platform account with its balances in every asset
// it has money in (or had: an account is created by its first credit and
// never removed).
type PlatformAccount struct {
	Name     string
	Balances []Balance
}

// PlatformAccounts returns a page of the platform accounts, by name, after
// the name `after` ("" for the first page), with the cursor of the next
// page (nil on the last). An account is listed once it has been credited;
// its balances are those of the assets it has accounts in.
func PlatformAccounts(ctx context.Context, idb bun.IDB, after string, limit int) ([]PlatformAccount, *string, error) {
	if limit == 0 {
		limit = DefaultPlatformAccountsLimit
	}
	if limit < 1 || limit > MaxPlatformAccountsLimit {
		return nil, nil, fmt.Errorf("ledger: platform accounts: limit %d outside 1..%d", limit, MaxPlatformAccountsLimit)
	}
	q, err := sqlOf(idb)
	if err != nil {
		return nil, nil, err
	}
	// The names from the partial index of platform accounts (migration
	// 0043): the accounts' own rows, not their shards' (a shard's row
	// exists only with its account's, PlatformShards). Then each name's
	// accounts from the unique (owner, asset, kind) index, the available
	// balance summed over the shards.
	rows, err := q.QueryContext(ctx, `
WITH names AS (
    SELECT DISTINCT owner FROM ledger_accounts
     WHERE kind = 'platform_available' AND owner > $1::text AND strpos(owner, '#') = 0
     ORDER BY owner LIMIT $2)
SELECT n.owner, a.asset, s.decimals, a.kind, sum(a.balance)::bigint
  FROM names n
  JOIN ledger_accounts a ON a.owner = ANY (ARRAY(
           SELECT n.owner || CASE WHEN k = 0 THEN '' ELSE '#' || k END FROM generate_series(0, $3::int - 1) AS k))
   AND a.kind IN ('platform_available', 'platform_hold', 'platform_escrow')
   AND (a.kind = 'platform_available' OR a.owner = n.owner)
  JOIN assets s ON s.asset = a.asset
 GROUP BY n.owner, a.asset, s.decimals, a.kind
 ORDER BY n.owner, a.asset`, after, limit+1, PlatformShards)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: platform accounts: %w", err)
	}
	defer rows.Close()
	var out []PlatformAccount
	for rows.Next() {
		var (
			name, code string
			decimals   int
			kind       AccountKind
			bal        int64
		)
		if err := rows.Scan(&name, &code, &decimals, &kind, &bal); err != nil {
			return nil, nil, fmt.Errorf("ledger: platform accounts: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].Name != name {
			out = append(out, PlatformAccount{Name: name})
		}
		acct := &out[len(out)-1]
		if n := len(acct.Balances); n == 0 || acct.Balances[n-1].Asset != code {
			acct.Balances = append(acct.Balances, Balance{Asset: code, Decimals: decimals})
		}
		b := &acct.Balances[len(acct.Balances)-1]
		switch kind {
		case PlatformAvailable:
			b.Available = bal
		case PlatformHold:
			b.Held = bal
		case PlatformEscrow:
			b.Reserved = bal
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("ledger: platform accounts: %w", err)
	}
	var next *string
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1].Name
		next = &last
	}
	return out, next, nil
}
