package hold

import (
	"context"
	"fmt"
	"strings"

	"github.com/uptrace/bun"

	"svc/modules/ledger"
)

// CheckEscrow is "escrow vs open holds": every escrow account's balance
// (user_escrow, platform_escrow) equals the amount of its payer's open
// holds in that asset, and every hold's ledger entries fit its status (one
// escrow_hold of its amount into the payer's escrow always; an
// escrow_capture exactly when captured; an escrow_release exactly when
// voided, expired, or captured with something returned). It is a
// ledger.WithdrawalCheck, run beside withdrawal.CheckHolds by the ledger
// check (svc admin ledger check, the hourly reconciliation): each finding
// starts with the asset it concerns.
func CheckEscrow(ctx context.Context, idb bun.IDB) ([]string, error) {
	var out []string
	var sums []struct {
		Platform bool   `bun:"p"`
		Payer    string `bun:"u"`
		Asset    string `bun:"a"`
		Open     int64  `bun:"open"`
		Escrow   int64  `bun:"escrow"`
	}
	err := idb.NewRaw(`
WITH open AS (SELECT payer_platform AS p, payer AS u, asset AS a, sum(amount) AS s
                FROM holds WHERE status = 'open' GROUP BY 1, 2, 3),
     esc AS (SELECT kind = 'platform_escrow' AS p, owner AS u, asset AS a, balance AS b
               FROM ledger_accounts WHERE kind IN ('user_escrow', 'platform_escrow') AND balance <> 0)
SELECT coalesce(o.p, e.p) AS p, coalesce(o.u, e.u) AS u, coalesce(o.a, e.a) AS a,
       coalesce(o.s, 0) AS open, coalesce(e.b, 0) AS escrow
  FROM open o FULL JOIN esc e ON e.p = o.p AND e.u = o.u AND e.a = o.a
 WHERE coalesce(o.s, 0) <> coalesce(e.b, 0)
 ORDER BY 3, 1, 2`).Scan(ctx, &sums)
	if err != nil {
		return nil, fmt.Errorf("hold: check escrow: %w", err)
	}
	for _, s := range sums {
		kind := ledger.UserEscrow
		if s.Platform {
			kind = ledger.PlatformEscrow
		}
		out = append(out, fmt.Sprintf("%s %s of %q is %d units, but its open holds reserve %d", s.Asset, kind, s.Payer, s.Escrow, s.Open))
	}
	var rows []struct {
		ID       string `bun:"id"`
		Asset    string `bun:"asset"`
		Status   Status `bun:"status"`
		Holds    int    `bun:"holds"`
		Captures int    `bun:"captures"`
		Releases int    `bun:"releases"`
		Right    bool   `bun:"right_amount"`
	}
	err = idb.NewRaw(`
WITH per AS (
SELECT h.id::text AS id, h.asset, h.status, h.released_amount,
       count(*) FILTER (WHERE e.kind = 'escrow_hold') AS holds,
       count(*) FILTER (WHERE e.kind = 'escrow_capture') AS captures,
       count(*) FILTER (WHERE e.kind = 'escrow_release') AS releases,
       coalesce(bool_or(e.kind = 'escrow_hold' AND EXISTS (
           SELECT 1 FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
            WHERE p.entry_id = e.id AND a.kind = CASE WHEN h.payer_platform THEN 'platform_escrow' ELSE 'user_escrow' END
              AND a.owner = h.payer AND a.asset = h.asset AND p.amount = h.amount)), false) AS right_amount
  FROM holds h
  LEFT JOIN ledger_entries e ON e.source_ref = h.id::text
       AND e.kind IN ('escrow_hold', 'escrow_capture', 'escrow_release')
 GROUP BY h.id, h.asset, h.status, h.released_amount)
SELECT id, asset, status, holds, captures, releases, right_amount FROM per
 WHERE holds <> 1 OR NOT right_amount
    OR (captures = 1) <> (status = 'captured')
    OR (releases = 1) <> (released_amount > 0)
    OR captures > 1 OR releases > 1
 ORDER BY 2, 1`).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("hold: check hold entries: %w", err)
	}
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s hold %s (%s): %d hold entries (amount right: %v), %d captures, %d releases",
			r.Asset, r.ID, r.Status, r.Holds, r.Right, r.Captures, r.Releases))
	}
	return out, nil
}

var _ ledger.WithdrawalCheck = CheckEscrow

// IsEscrowFinding reports a finding of CheckEscrow among a ledger check's
// hold mismatches (ledger.Report.HoldMismatches, where every
// WithdrawalCheck's findings go), so that a report can list "escrow vs open
// holds" apart from "holds vs open withdrawals".
func IsEscrowFinding(s string) bool {
	_, rest, ok := strings.Cut(s, " ")
	return ok && (strings.HasPrefix(rest, string(ledger.UserEscrow)+" of ") ||
		strings.HasPrefix(rest, string(ledger.PlatformEscrow)+" of ") || strings.HasPrefix(rest, "hold "))
}
