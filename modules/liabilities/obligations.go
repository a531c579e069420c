package liabilities

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"svc/platform/db"
)

// ObligationsAt returns, by snapshot id, what the ledger owed in the
// snapshot's asset (every owned balance: the users' available, held and
// reserved, and the platform accounts', the accounts a snapshot's leaves
// sum) at the ledger snapshot the liabilities snapshot was read on
// (liabilities_snapshots.ledger_snapshot, migration 0033): the balances
// now, less the postings on those accounts of the entries that snapshot
// did not see. Those entries are found from the
// snapshot's xmin on, through the (created_xact, id) index, so the cost is
// one pass over the accounts and the entries committed since. A snapshot
// published without its ledger snapshot (before that migration) is left
// out.
func (s *Service) ObligationsAt(ctx context.Context, ids []int64) (map[int64]int64, error) {
	out := map[int64]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	err := pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, db.SerialReadSettings); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
WITH snaps AS MATERIALIZED (
       SELECT id, asset, ledger_snapshot AS snap FROM liabilities_snapshots WHERE id = ANY($1) AND ledger_snapshot IS NOT NULL),
now AS (SELECT a.asset, sum(a.balance) AS total FROM ledger_accounts a
         WHERE a.kind = ANY($2::text[]) AND a.asset IN (SELECT asset FROM snaps) GROUP BY a.asset),
later AS (SELECT s.id, sum(p.amount) AS amount
            FROM snaps s
            JOIN ledger_entries e ON e.asset = s.asset AND e.created_xact >= pg_snapshot_xmin(s.snap)
                                 AND NOT pg_visible_in_snapshot(e.created_xact, s.snap)
            JOIN ledger_postings p ON p.entry_id = e.id
            JOIN ledger_accounts a ON a.id = p.account_id AND a.kind = ANY($2::text[])
           GROUP BY s.id)
SELECT s.id, (coalesce(n.total, 0) - coalesce(l.amount, 0))::bigint
  FROM snaps s LEFT JOIN now n ON n.asset = s.asset LEFT JOIN later l ON l.id = s.id`, ids, ownedKinds)
		if err != nil {
			return err
		}
		var id, owed int64
		_, err = pgx.ForEachRow(rows, []any{&id, &owed}, func() error {
			out[id] = owed
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("liabilities: what the ledger owed at the snapshots: %w", err)
	}
	return out, nil
}
