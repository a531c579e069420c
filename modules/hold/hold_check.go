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
	lines, err := checkLines(ctx, idb)
	if err != nil {
		return nil, err
	}
	return append(out, lines...), nil
}

// checkLines compares every escrow entry's postings with what its hold
// says, line by line: an escrow_hold moves the amount from the payer's
// available to its escrow; an escrow_capture takes captured_amount from
// the escrow and pays each of the hold's captures to its recipient's
// available; an escrow_release moves released_amount back. An escrow entry
// whose source_ref is no hold is a finding too. Without this, the runtime
// role could post a hold and its capture to another account under a
// reference no hold has, or pay a real hold's capture to someone its
// captures do not name, and every escrow balance would still match the
// open holds.
func checkLines(ctx context.Context, idb bun.IDB) ([]string, error) {
	var rows []struct {
		Asset    string `bun:"asset"`
		Ref      string `bun:"ref"`
		Kind     string `bun:"kind"`
		Known    bool   `bun:"known"`
		Actual   string `bun:"actual"`
		Expected string `bun:"expected"`
	}
	err := idb.NewRaw(`
WITH e AS (
SELECT e.id, e.kind::text AS kind, e.asset, e.source_ref,
       (SELECT string_agg(a.kind::text || '(' || CASE WHEN a.kind = 'platform_available' THEN split_part(a.owner, '#', 1) ELSE a.owner END || ')' || p.amount, ' '
                          ORDER BY a.kind::text, CASE WHEN a.kind = 'platform_available' THEN split_part(a.owner, '#', 1) ELSE a.owner END, p.amount)
          FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id WHERE p.entry_id = e.id) AS actual
  FROM ledger_entries e
 WHERE e.kind IN ('escrow_hold', 'escrow_capture', 'escrow_release')),
h AS (
SELECT h.*, CASE WHEN h.payer_platform THEN 'platform_available' ELSE 'user_available' END AS avail,
       CASE WHEN h.payer_platform THEN 'platform_escrow' ELSE 'user_escrow' END AS esc
  FROM holds h),
want AS (
SELECT e.id, v.k, v.o, v.amt
  FROM e JOIN h ON h.id::text = e.source_ref
 CROSS JOIN LATERAL (
        SELECT h.avail AS k, h.payer AS o, -h.amount AS amt WHERE e.kind = 'escrow_hold'
        UNION ALL SELECT h.esc, h.payer, h.amount WHERE e.kind = 'escrow_hold'
        UNION ALL SELECT h.esc, h.payer, -h.captured_amount WHERE e.kind = 'escrow_capture'
        UNION ALL SELECT CASE WHEN c.to_platform THEN 'platform_available' ELSE 'user_available' END, c.to_id, c.amount
                    FROM hold_captures c WHERE c.hold_id = h.id AND e.kind = 'escrow_capture'
        UNION ALL SELECT h.esc, h.payer, -h.released_amount WHERE e.kind = 'escrow_release'
        UNION ALL SELECT h.avail, h.payer, h.released_amount WHERE e.kind = 'escrow_release') v),
expected AS (SELECT id, string_agg(k || '(' || o || ')' || amt, ' ' ORDER BY k, o, amt) AS lines FROM want GROUP BY id)
SELECT e.asset, e.source_ref AS ref, e.kind, h.id IS NOT NULL AS known, coalesce(e.actual, '') AS actual, coalesce(x.lines, '') AS expected
  FROM e LEFT JOIN h ON h.id::text = e.source_ref LEFT JOIN expected x ON x.id = e.id
 WHERE h.id IS NULL OR x.lines IS DISTINCT FROM e.actual
 ORDER BY 1, 2, 3`).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("hold: check the escrow entries' lines: %w", err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		if !r.Known {
			out = append(out, fmt.Sprintf("%s hold %s does not exist, but an %s entry under its reference posts %s", r.Asset, r.Ref, r.Kind, r.Actual))
			continue
		}
		out = append(out, fmt.Sprintf("%s hold %s: its %s entry posts %s, not %s", r.Asset, r.Ref, r.Kind, r.Actual, r.Expected))
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
