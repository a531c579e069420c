package ledger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
)

// TestRuntimeRoleCannotTamper connects as the runtime role the service
// runs with (the grants of svc migrate) and tries, each in a transaction of
// its own, what a bug or an injected statement would do to the ledger.
// Each is refused, and afterwards the ledger is exactly what it was.
func TestRuntimeRoleCannotTamper(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4) // the runtime role
	ctx := context.Background()
	p := credit(t, d, "BTC", "olga", 1_000, "pay-1")
	_, err := hold(t, d, "BTC", "olga", 300, "wd-1")
	require.NoError(t, err)
	var olga, custody, feeIncome int64
	require.NoError(t, d.NewRaw(`SELECT
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'user_available' AND owner = 'olga'),
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'custody'),
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'fee_income')`).Scan(ctx, &olga, &custody, &feeIncome))

	digest := func() string {
		var s string
		require.NoError(t, d.NewRaw(`SELECT concat_ws('|',
  (SELECT md5(string_agg(concat_ws(':', id, kind, asset, source_ref, memo, created_at), ',' ORDER BY id)) FROM ledger_entries),
  (SELECT md5(string_agg(concat_ws(':', id, entry_id, account_id, amount, balance_after), ',' ORDER BY id)) FROM ledger_postings),
  (SELECT md5(string_agg(concat_ws(':', id, asset, kind, owner, balance), ',' ORDER BY id)) FROM ledger_accounts))`).Scan(ctx, &s))
		return s
	}
	before := digest()

	exec := func(query string, args ...any) func() error {
		return func() error {
			return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.ExecContext(ctx, query, args...)
				return err
			})
		}
	}
	// inEntry writes a new entry and then postings into it, in one
	// transaction.
	inEntry := func(ref, postings string, args ...any) func() error {
		return func() error {
			return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
				var id int64
				if err := tx.NewRaw(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', ?) RETURNING id`, ref).Scan(ctx, &id); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, postings, append([]any{id}, args...)...)
				return err // a deferred check refuses at commit
			})
		}
	}
	for _, tc := range []struct {
		name, want string
		run        func() error
	}{
		{"UpdatePostings", "permission denied", exec(`UPDATE ledger_postings SET amount = amount + 1`)},
		{"DeletePostings", "permission denied", exec(`DELETE FROM ledger_postings`)},
		{"TruncatePostings", "permission denied", exec(`TRUNCATE ledger_postings`)},
		{"UpdateEntries", "permission denied", exec(`UPDATE ledger_entries SET memo = 'x'`)},
		{"DeleteEntries", "permission denied", exec(`DELETE FROM ledger_entries`)},
		{"TruncateEntries", "permission denied", exec(`TRUNCATE ledger_entries`)},
		{"DeleteAccounts", "permission denied", exec(`DELETE FROM ledger_accounts`)},
		{"RenameAccount", "permission denied", exec(`UPDATE ledger_accounts SET owner = 'mallory' WHERE id = ?`, olga)},
		{"DisableTriggers", "must be owner", exec(`ALTER TABLE ledger_postings DISABLE TRIGGER ALL`)},
		{"DisableOneTrigger", "must be owner", exec(`ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_balanced`)},
		{"ReplicationRole", "permission denied", exec(`SET session_replication_role = replica`)},
		{"ReplicationRoleLocal", "permission denied", exec(`SET LOCAL session_replication_role = replica`)},
		{"DropTrigger", "must be owner", exec(`DROP TRIGGER ledger_postings_append_only ON ledger_postings`)},
		{"DropTable", "must be owner", exec(`DROP TABLE ledger_postings CASCADE`)},
		{"ReplaceGuardFunction", "permission denied", exec(`CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`)},
		{"NewTableInSchema", "permission denied", exec(`CREATE TABLE ledger_shadow (id int)`)},
		{"PostingIntoAnotherTransactionsEntry", "ledger_postings_check",
			exec(`INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 1), (?, ?, -1)`, p.ID, olga, p.ID, custody)},
		{"UnbalancedEntry", "ledger_entries_balanced",
			inEntry("forged-1", `INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 500)`, feeIncome)},
		// A materialized balance moves only with its postings (migration 0014).
		{"MoveABalance", "ledger_balance_posted", exec(`UPDATE ledger_accounts SET balance = balance + 1000 WHERE id = ?`, olga)},
		{"MoveEveryBalance", "ledger_balance_posted", exec(`UPDATE ledger_accounts SET balance = balance + 1 WHERE balance IS NOT NULL`)},
		{"NewAccountWithABalance", "ledger_balance_posted",
			exec(`INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'mallory', 1000)`)},
		{"CreditWithoutAnEntry", "ledger_balance_posted",
			exec(`INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'olga', 1000)
  ON CONFLICT (owner, asset, kind) DO UPDATE SET balance = ledger_accounts.balance + EXCLUDED.balance`)},
		{"PostingWithoutItsBalance", "ledger_balance_posted",
			inEntry("forged-2", `INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_at)
  SELECT e.id, v.a, v.amount, v.after, CASE WHEN v.usr THEN e.kind END, CASE WHEN v.usr THEN e.source_ref END,
         CASE WHEN v.usr THEN e.created_at END
    FROM (SELECT ?::bigint AS id) x JOIN ledger_entries e ON e.id = x.id,
         (VALUES (?::bigint, 500::bigint, 1200::bigint, true), (?::bigint, -500::bigint, NULL::bigint, false)) AS v (a, amount, after, usr)`, olga, custody)},
		{"SecondCreditOfAPayment", "ledger_entries_source",
			exec(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('deposit_credit', 'BTC', 'pay-1')`)},
	} {
		err := tc.run()
		require.Error(t, err, tc.name)
		require.True(t, contains(err, tc.want), "%s: %v", tc.name, err)
		require.Equal(t, before, digest(), "%s left the ledger changed", tc.name)
	}
	requireInvariants(t, d)
}

func contains(err error, want string) bool {
	return constraintOf(err) == want || strings.Contains(err.Error(), want)
}
