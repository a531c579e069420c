package deposit

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// CheckCredits lists, for reconciliation, every way the deposit payments
// and the ledger's deposit credits disagree: a credited payment whose
// entry is missing, is not a deposit credit or credits another amount; a
// deposit credit that no payment owns (the unique ledger_entry_id makes a
// payment credited twice impossible, so this is the other half of
// "exactly once"); and a payment the processor settled that is neither
// credited nor waiting for an operator (its deposit in review, or
// dismissed by one). Entries whose source_ref starts with "test-funding:"
// are not deposits and are skipped.
func CheckCredits(ctx context.Context, idb bun.IDB) ([]string, error) {
	var out []string
	rows, err := idb.QueryContext(ctx, `
SELECT 'deposit payment ' || dp.payment_id || ' of deposit ' || dp.deposit_id || ' is credited, but ' ||
       CASE WHEN e.id IS NULL THEN 'its ledger entry ' || dp.ledger_entry_id || ' does not exist'
            WHEN e.kind <> 'deposit_credit' THEN 'its ledger entry ' || e.id || ' is a ' || e.kind
            ELSE 'its ledger entry ' || e.id || ' credits ' || coalesce((SELECT sum(p.amount) FROM ledger_postings p
                 JOIN ledger_accounts a ON a.id = p.account_id AND a.kind = 'user_available' WHERE p.entry_id = e.id), 0)
                 || ' units, not ' || dp.units END
  FROM deposit_payments dp LEFT JOIN ledger_entries e ON e.id = dp.ledger_entry_id
 WHERE dp.credited AND (e.id IS NULL OR e.kind <> 'deposit_credit' OR dp.units IS DISTINCT FROM (SELECT sum(p.amount)
       FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id AND a.kind = 'user_available' WHERE p.entry_id = e.id))
UNION ALL
SELECT 'ledger entry ' || e.id || ' (deposit_credit ' || e.source_ref || ') is owned by no credited deposit payment'
  FROM ledger_entries e
 WHERE e.kind = 'deposit_credit' AND e.source_ref NOT LIKE 'test-funding:%'
   AND NOT EXISTS (SELECT 1 FROM deposit_payments dp WHERE dp.ledger_entry_id = e.id AND dp.credited)
UNION ALL
SELECT 'deposit payment ' || dp.payment_id || ' of deposit ' || dp.deposit_id || ' was settled by the processor but is neither credited nor in review'
  FROM deposit_payments dp JOIN deposits d ON d.id = dp.deposit_id
 WHERE dp.processor_status = 'Settled' AND NOT dp.credited AND d.status NOT IN (?, ?)
 LIMIT 1000`, StatusReview, StatusDismissed)
	if err != nil {
		return nil, fmt.Errorf("deposit: check credits: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("deposit: check credits: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
