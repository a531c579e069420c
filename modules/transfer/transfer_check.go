package transfer

import (
	"context"
	"fmt"
	"strings"

	"github.com/uptrace/bun"

	"svc/modules/ledger"
)

// CheckLegs compares the transfers' legs with their ledger entries: every
// leg has its entry of kind transfer (source_ref "<transfer_id>:<leg>",
// SourceRef) with exactly two postings, the leg's amount debited from its
// from's available account and credited to its to's, in its asset; and
// every transfer entry is the entry of a leg. Each transfer has exactly
// its leg_count legs, numbered from 0, and its parties are exactly the
// accounts of its legs: a leg or a party written later, beside the
// transfer the platform was answered (the runtime role may insert into
// these tables), is a finding too. It is a
// ledger.WithdrawalCheck (run in the ledger check's snapshot by
// svc admin ledger check and by reconciliation): each finding starts with
// the asset it concerns.
func CheckLegs(ctx context.Context, idb bun.IDB) ([]string, error) {
	var rows []struct {
		Ref        string `bun:"ref"`
		Asset      string `bun:"asset"`
		HasLeg     bool   `bun:"has_leg"`
		HasEntry   bool   `bun:"has_entry"`
		Postings   int    `bun:"postings"`
		LegFrom    string `bun:"leg_from"`
		LegTo      string `bun:"leg_to"`
		LegAmount  int64  `bun:"leg_amount"`
		EntryFrom  string `bun:"entry_from"`
		EntryTo    string `bun:"entry_to"`
		Debited    int64  `bun:"debited"`
		Credited   int64  `bun:"credited"`
		EntryAsset string `bun:"entry_asset"`
	}
	err := idb.NewRaw(`
WITH legs AS (
SELECT l.transfer_id::text || ':' || l.leg AS ref, l.asset, l.amount,
       CASE WHEN l.from_platform THEN 'platform_available' ELSE 'user_available' END || '(' || l.from_owner || ')' AS acc_from,
       CASE WHEN l.to_platform THEN 'platform_available' ELSE 'user_available' END || '(' || l.to_owner || ')' AS acc_to
  FROM transfer_legs l),
entries AS (
SELECT e.source_ref AS ref, e.asset, count(p.id) AS postings,
       coalesce(min(a.kind::text || '(' || CASE WHEN a.kind = 'platform_available' THEN split_part(a.owner, '#', 1) ELSE a.owner END || ')') FILTER (WHERE p.amount < 0), '') AS acc_from,
       coalesce(min(a.kind::text || '(' || CASE WHEN a.kind = 'platform_available' THEN split_part(a.owner, '#', 1) ELSE a.owner END || ')') FILTER (WHERE p.amount > 0), '') AS acc_to,
       coalesce(-sum(p.amount) FILTER (WHERE p.amount < 0), 0) AS debited,
       coalesce(sum(p.amount) FILTER (WHERE p.amount > 0), 0) AS credited
  FROM ledger_entries e
  LEFT JOIN ledger_postings p ON p.entry_id = e.id
  LEFT JOIN ledger_accounts a ON a.id = p.account_id
 WHERE e.kind = 'transfer'
 GROUP BY e.id, e.source_ref, e.asset)
SELECT coalesce(l.ref, e.ref) AS ref, coalesce(l.asset, e.asset) AS asset,
       l.ref IS NOT NULL AS has_leg, e.ref IS NOT NULL AS has_entry, coalesce(e.postings, 0) AS postings,
       coalesce(l.acc_from, '') AS leg_from, coalesce(l.acc_to, '') AS leg_to, coalesce(l.amount, 0) AS leg_amount,
       coalesce(e.acc_from, '') AS entry_from, coalesce(e.acc_to, '') AS entry_to,
       coalesce(e.debited, 0) AS debited, coalesce(e.credited, 0) AS credited, coalesce(e.asset, '') AS entry_asset
  FROM legs l FULL JOIN entries e ON e.ref = l.ref
 WHERE l.ref IS NULL OR e.ref IS NULL OR e.postings <> 2 OR e.asset <> l.asset
    OR e.acc_from <> l.acc_from OR e.acc_to <> l.acc_to OR e.debited <> l.amount OR e.credited <> l.amount
 ORDER BY 1`).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("transfer: check legs: %w", err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		switch {
		case !r.HasEntry:
			out = append(out, fmt.Sprintf("%s transfer leg %s (%d units from %s to %s) has no transfer entry", r.Asset, r.Ref, r.LegAmount, r.LegFrom, r.LegTo))
		case !r.HasLeg:
			out = append(out, fmt.Sprintf("%s transfer entry %s (%d units from %s to %s) is the entry of no transfer leg", r.Asset, r.Ref, r.Debited, r.EntryFrom, r.EntryTo))
		default:
			out = append(out, fmt.Sprintf("%s transfer leg %s is %d units from %s to %s, but its entry (%s, %d postings) debits %d from %s and credits %d to %s",
				r.Asset, r.Ref, r.LegAmount, r.LegFrom, r.LegTo, r.EntryAsset, r.Postings, r.Debited, r.EntryFrom, r.Credited, r.EntryTo))
		}
	}
	shape, err := checkShape(ctx, idb)
	if err != nil {
		return nil, err
	}
	return append(out, shape...), nil
}

// checkShape finds the transfers whose legs are not their leg_count legs
// 0 to leg_count-1, and the parties that are not exactly their legs'
// accounts. A finding starts with the asset of the transfer's first leg
// (none when it has no leg: it then concerns every asset).
func checkShape(ctx context.Context, idb bun.IDB) ([]string, error) {
	var rows []struct {
		Asset  string `bun:"asset"`
		Detail string `bun:"detail"`
	}
	err := idb.NewRaw(`
WITH counted AS (
SELECT t.id, t.leg_count, count(l.leg) AS n, coalesce(max(l.leg), -1) AS top, coalesce(min(l.asset), '') AS asset
  FROM transfers t LEFT JOIN transfer_legs l ON l.transfer_id = t.id
 GROUP BY t.id, t.leg_count),
want AS (
SELECT transfer_id, from_platform AS platform, from_owner AS owner, asset FROM transfer_legs
 UNION
SELECT transfer_id, to_platform, to_owner, asset FROM transfer_legs),
want1 AS (SELECT transfer_id, platform, owner, min(asset) AS asset FROM want GROUP BY transfer_id, platform, owner),
have AS (SELECT DISTINCT transfer_id, platform, owner FROM transfer_parties)
SELECT c.asset, format('transfer %s has %s legs numbered up to %s, not its %s legs 0 to %s', c.id, c.n, c.top, c.leg_count, c.leg_count - 1) AS detail
  FROM counted c WHERE c.n <> c.leg_count OR c.top <> c.leg_count - 1
 UNION ALL
SELECT coalesce(w.asset, (SELECT min(asset) FROM transfer_legs WHERE transfer_id = h.transfer_id), ''),
       format('transfer %s %s %s %s', coalesce(w.transfer_id, h.transfer_id),
              CASE WHEN w.transfer_id IS NULL THEN 'lists as a party' ELSE 'does not list as a party' END,
              CASE WHEN coalesce(w.platform, h.platform) THEN 'platform account' ELSE 'user' END, coalesce(w.owner, h.owner))
  FROM want1 w FULL JOIN have h ON h.transfer_id = w.transfer_id AND h.platform = w.platform AND h.owner = w.owner
 WHERE w.transfer_id IS NULL OR h.transfer_id IS NULL
 ORDER BY 2`).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("transfer: check the transfers' legs and parties: %w", err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		if r.Asset == "" {
			out = append(out, r.Detail)
			continue
		}
		out = append(out, r.Asset+" "+r.Detail)
	}
	return out, nil
}

var _ ledger.WithdrawalCheck = CheckLegs

// IsLegFinding reports a finding of CheckLegs among a ledger check's hold
// mismatches (ledger.Report.HoldMismatches, where every WithdrawalCheck's
// findings go), so that a report can list "transfers vs their legs" apart.
func IsLegFinding(s string) bool {
	if strings.HasPrefix(s, "transfer ") {
		return true // a transfer with no leg: no asset before it
	}
	_, rest, ok := strings.Cut(s, " ")
	return ok && strings.HasPrefix(rest, "transfer ")
}
