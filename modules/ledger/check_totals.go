package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"svc/platform/db"
)

// # The system accounts' totals, carried from check to check
//
// A system account has no materialized balance: its balance is the sum of
// its postings, and the custody accounts alone hold half the postings of
// the ledger. Summing them on every check grows with the ledger (1.4 s
// at ten million postings). Instead each recorded check keeps, by account
// id, the sum of each system account's postings whose entries belong to
// transactions below its boundary (ledger_checks.system_sums, migration
// 0024). Those sums never change: no entry of a transaction below the
// boundary can commit after the check (check_incremental.go has the
// argument). The next check starts from the sums of the consistent check
// it continues and adds the postings of the entries from that boundary
// on, the same index range read of new entries the check makes anyway:
//
//	total now        = carried + sum(postings of entries at or above the old boundary)
//	carried forward  = carried + sum(postings of entries between the two boundaries)
//
// A system account that is not among the carried sums was opened after
// that check's snapshot, so it has no posting below its boundary (a
// posting needs its account visible, and a transaction below the boundary
// had ended before the snapshot). A full check, or one continuing a check
// recorded without sums, sums every system account's postings once and
// carries forward that total less the postings at or above its own
// boundary.
//
// The users' totals are the sum of their materialized balances, as
// before: one pass over the accounts, made by the incremental check's
// account pass (scanUserAccounts) when there is one.

// checkTotals returns every asset's Totals in q's snapshot, and each
// system account's sum of postings below the snapshot's boundary to, for
// the check's record. since is the consistent check an incremental check
// continues, or nil; users, when not nil, are the users' balances already
// summed in the same snapshot (the incremental check's pass over the
// accounts).
//
// A full check (since nil) sums every system account's postings, and
// with them verifies the sums carried by prior, the latest consistent
// check, when it carried any: below prior's boundary, the postings must
// still sum to what it recorded. A mismatch means a posting below that
// boundary was changed around the triggers, or a check row that was not
// written by a check; it is returned as a finding.
func checkTotals(ctx context.Context, q db.Querier, amt amounts, since, prior *recordedCheck, to uint64, users totalsBuilder) ([]Totals, map[int64]int64, []string, error) {
	t := users
	if t == nil {
		if err := t.addUsers(ctx, q); err != nil {
			return nil, nil, nil, err
		}
	}
	carry := since != nil && since.systemSums != nil
	verify := !carry && since == nil && prior != nil && prior.systemSums != nil && prior.xidTo <= to
	from := to
	switch {
	case carry:
		from = since.xidTo
	case verify:
		from = prior.xidTo
	}
	// Per system account: its postings of entries from the boundary
	// carried or verified (with neither, from this check's boundary) on,
	// those of them below this check's boundary, and, when nothing is
	// carried, the sum of all its postings.
	rows, err := q.QueryContext(ctx, `
WITH sys AS MATERIALIZED (SELECT id, asset, kind FROM ledger_accounts WHERE owner = ''),
n AS MATERIALIZED (
       SELECT p.account_id, sum(p.amount) AS since, sum(p.amount) FILTER (WHERE e.created_xact < $2::text::xid8) AS below
         FROM ledger_entries e
         JOIN ledger_postings p ON p.entry_id = e.id
        WHERE e.created_xact >= $1::text::xid8 AND p.account_id IN (SELECT id FROM sys)
        GROUP BY p.account_id)
SELECT a.id, a.asset, a.kind, coalesce(n.since, 0)::bigint, coalesce(n.below, 0)::bigint,
       CASE WHEN $3 THEN 0 ELSE (SELECT coalesce(sum(p.amount), 0) FROM ledger_postings p WHERE p.account_id = a.id) END::bigint
  FROM sys a
  LEFT JOIN n ON n.account_id = a.id
 ORDER BY a.id`, strconv.FormatUint(from, 10), strconv.FormatUint(to, 10), carry)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ledger: totals: %w", err)
	}
	defer rows.Close()
	below := map[int64]int64{}
	var mismatches []string
	for rows.Next() {
		var (
			id                     int64
			code                   string
			kind                   AccountKind
			sinceSum, between, all int64
		)
		if err := rows.Scan(&id, &code, &kind, &sinceSum, &between, &all); err != nil {
			return nil, nil, nil, fmt.Errorf("ledger: totals: %w", err)
		}
		if carry {
			base := since.systemSums[id]
			t.add(code, kind, base+sinceSum)
			below[id] = base + between
			continue
		}
		// sinceSum is what lies at or above from, between what of it
		// lies below to.
		t.add(code, kind, all)
		below[id] = all - sinceSum + between
		if !verify {
			continue
		}
		// A system account prior did not see was opened after its
		// snapshot: 0 below its boundary.
		if want := prior.systemSums[id]; all-sinceSum != want {
			mismatches = append(mismatches, fmt.Sprintf("%s %s (account %d): check %d carried %s below its boundary, but the postings there come to %s",
				code, kind, id, prior.id, amt.format(code, kind.Natural(want)), amt.format(code, kind.Natural(all-sinceSum))))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("ledger: totals: %w", err)
	}
	return t.list(), below, mismatches, nil
}

// decodeSums reads the carried sums of ledger_checks.system_sums: a JSON
// object from account id to sum (written by ledger_record_check, migration
// 0033).
func decodeSums(s *string) (map[int64]int64, error) {
	if s == nil {
		return nil, nil
	}
	m := map[int64]int64{}
	if err := json.Unmarshal([]byte(*s), &m); err != nil {
		return nil, fmt.Errorf("read the carried system sums: %w", err)
	}
	return m, nil
}
