package ledger

import (
	"context"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
)

// CheckSweeps finds the shard_sweep entries that are not a sweep: an entry
// whose lines are not all of one platform account's available shards, or
// that does not credit that account's own row (shard 0) with what it
// debits its other shards. The runtime role can insert entries of any
// kind; without this check it could move money between two platform
// accounts, or to a user, as a "sweep", and every balance would still
// match its postings. It is a WithdrawalCheck (the ledger check runs it
// with the modules' checks): each finding starts with the asset it
// concerns, then "shard_sweep".
func CheckSweeps(ctx context.Context, idb bun.IDB) ([]string, error) {
	var rows []struct {
		Asset string `bun:"asset"`
		Ref   string `bun:"source_ref"`
		Lines string `bun:"lines"`
	}
	err := idb.NewRaw(`
SELECT e.asset, e.source_ref,
       string_agg(a.kind::text || '(' || a.owner || ') ' || p.amount, ', ' ORDER BY p.id) AS lines
  FROM ledger_entries e
  JOIN ledger_postings p ON p.entry_id = e.id
  JOIN ledger_accounts a ON a.id = p.account_id
 WHERE e.kind = 'shard_sweep'
 GROUP BY e.id, e.asset, e.source_ref
HAVING bool_or(a.kind <> 'platform_available')
    OR count(DISTINCT split_part(a.owner, '#', 1)) <> 1
    OR count(*) FILTER (WHERE strpos(a.owner, '#') = 0) <> 1
    OR bool_or(strpos(a.owner, '#') = 0 AND p.amount <= 0)
    OR bool_or(strpos(a.owner, '#') > 0 AND p.amount >= 0)
 ORDER BY 1, 2`).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("ledger: check sweeps: %w", err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s shard_sweep %s is not one platform account's shards gathered into its own row: %s", r.Asset, r.Ref, r.Lines))
	}
	return out, nil
}

var _ WithdrawalCheck = CheckSweeps

// IsSweepFinding reports a finding of CheckSweeps among a ledger check's
// hold mismatches (Report.HoldMismatches, where every WithdrawalCheck's
// findings go), so that a report can list them apart.
func IsSweepFinding(s string) bool {
	_, rest, ok := strings.Cut(s, " ")
	return ok && strings.HasPrefix(rest, "shard_sweep ")
}
