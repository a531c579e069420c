package withdrawal

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/ledger"
)

// CheckHolds compares the ledger's holds with the withdrawals that own
// them: every user's user_hold balance, and every platform account's
// platform_hold balance, equals the gross of their withdrawals whose money
// is still held, and every withdrawal's ledger
// entries fit its status (a hold always; a release exactly when refunded; a
// settlement exactly when confirmed). It is a ledger.WithdrawalCheck: each
// finding starts with the asset it concerns.
func CheckHolds(ctx context.Context, idb bun.IDB) ([]string, error) {
	var out []string
	var sums []struct {
		Kind  string `bun:"k"`
		User  string `bun:"u"`
		Asset string `bun:"a"`
		Open  int64  `bun:"open"`
		Held  int64  `bun:"held"`
	}
	err := idb.NewRaw(`
WITH open AS (SELECT CASE WHEN platform_account IS NULL THEN 'user_hold' ELSE 'platform_hold' END AS k,
                     coalesce(external_user_id, platform_account) AS u, asset AS a, sum(amount_gross) AS g
                FROM withdrawals WHERE status NOT IN ('confirmed', 'refunded', 'rejected') GROUP BY 1, 2, 3),
     held AS (SELECT kind::text AS k, owner AS u, asset AS a, balance AS b FROM ledger_accounts
               WHERE kind IN ('user_hold', 'platform_hold') AND balance <> 0)
SELECT coalesce(o.k, h.k) AS k, coalesce(o.u, h.u) AS u, coalesce(o.a, h.a) AS a, coalesce(o.g, 0) AS open, coalesce(h.b, 0) AS held
  FROM open o FULL JOIN held h ON h.k = o.k AND h.u = o.u AND h.a = o.a
 WHERE coalesce(o.g, 0) <> coalesce(h.b, 0)
 ORDER BY 2, 3, 1`).Scan(ctx, &sums)
	if err != nil {
		return nil, fmt.Errorf("withdrawal: check holds: %w", err)
	}
	for _, s := range sums {
		out = append(out, fmt.Sprintf("%s %s of %q is %d units, but its open withdrawals hold %d", s.Asset, s.Kind, s.User, s.Held, s.Open))
	}
	var rows []struct {
		ID       string `bun:"id"`
		Asset    string `bun:"asset"`
		Status   Status `bun:"status"`
		Holds    int    `bun:"holds"`
		Releases int    `bun:"releases"`
		Settles  int    `bun:"settles"`
		Right    bool   `bun:"right_amount"`
	}
	err = idb.NewRaw(`
WITH per AS (
SELECT w.id::text AS id, w.asset, w.status,
       count(*) FILTER (WHERE e.kind = 'withdrawal_hold') AS holds,
       count(*) FILTER (WHERE e.kind = 'withdrawal_release') AS releases,
       count(*) FILTER (WHERE e.kind = 'payout_settle') AS settles,
       coalesce(bool_or(e.kind = 'withdrawal_hold' AND EXISTS (
           SELECT 1 FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
            WHERE p.entry_id = e.id AND a.owner = coalesce(w.external_user_id, w.platform_account)
              AND a.kind = CASE WHEN w.platform_account IS NULL THEN 'user_hold' ELSE 'platform_hold' END
              AND a.asset = w.asset AND p.amount = w.amount_gross)), false) AS right_amount
  FROM withdrawals w
  LEFT JOIN ledger_entries e ON e.source_ref = w.id::text
       AND e.kind IN ('withdrawal_hold', 'withdrawal_release', 'payout_settle')
 GROUP BY w.id, w.asset, w.status)
SELECT * FROM per
 WHERE holds <> 1 OR NOT right_amount
    OR (releases = 1) <> (status IN ('refunded', 'rejected'))
    OR (settles = 1) <> (status = 'confirmed')
 ORDER BY 1`).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("withdrawal: check withdrawal entries: %w", err)
	}
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s withdrawal %s (%s): %d hold entries (amount right: %v), %d releases, %d settlements",
			r.Asset, r.ID, r.Status, r.Holds, r.Right, r.Releases, r.Settles))
	}
	return out, nil
}

var _ ledger.WithdrawalCheck = CheckHolds

// LeavingCustody is, per asset, the gross of the withdrawals whose money
// may already have left the wallet although the ledger has not recorded a
// broadcast yet: handed to the processor (submitting, submitted: a
// Lightning payment in progress, or a transaction the tracker has not seen
// yet) and approved USDT_TRC20 (an operator may have sent it before
// reporting it). Reconciliation counts it as an expected shortfall.
func LeavingCustody(ctx context.Context, idb bun.IDB) (map[string]int64, error) {
	var rows []struct {
		Asset string `bun:"asset"`
		Gross int64  `bun:"gross"`
	}
	if err := idb.NewSelect().Model((*Withdrawal)(nil)).ColumnExpr("asset, sum(amount_gross) AS gross").
		Where("status IN (?) OR (asset = ? AND status = ?)", bun.List([]Status{StatusSubmitting, StatusSubmitted}), asset.USDTTRC20, StatusApproved).
		GroupExpr("asset").Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("withdrawal: money leaving custody: %w", err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Asset] = r.Gross
	}
	return out, nil
}
