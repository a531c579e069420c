package ledger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/dbtest"
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
	// Two queued payouts, as the service stores them: one approved whose
	// fee is not fixed yet, one whose fee and net are fixed (migration
	// 0032 guards both).
	approved, fixed := insertWithdrawal(t, d, "olga", 300, nil), insertWithdrawal(t, d, "olga", 400, ptr(int64(150)))

	digest := func() string {
		var s string
		require.NoError(t, d.NewRaw(`SELECT concat_ws('|',
  (SELECT md5(string_agg(concat_ws(':', id, kind, asset, source_ref, memo, created_at), ',' ORDER BY id)) FROM ledger_entries),
  (SELECT md5(string_agg(concat_ws(':', id, entry_id, account_id, amount, balance_after), ',' ORDER BY id)) FROM ledger_postings),
  (SELECT md5(string_agg(concat_ws(':', id, asset, kind, owner, balance), ',' ORDER BY id)) FROM ledger_accounts),
  (SELECT md5(string_agg(concat_ws(':', id, external_user_id, asset, status, destination, amount_gross, fee_mode, fee, amount_net),
                         ',' ORDER BY id)) FROM withdrawals))`).Scan(ctx, &s))
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
		// A table of the session's own that shadows the ledger's for the
		// triggers (migration 0031; no TEMP for the runtime role).
		{"TempPostingsJustifyABalance", "permission denied to create temporary tables",
			func() error { return tempPostingsJustifyABalance(ctx, d, olga) }},
		{"OneSidedCreditUnderTempPostings", "permission denied to create temporary tables",
			func() error { return oneSidedCreditUnderTempPostings(ctx, d, olga, custody) }},
		// A queued payout's instructions (migration 0032).
		{"NetAThousandTimesTheGross", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET amount_net = amount_gross * 1000 WHERE id = ?`, fixed)},
		{"FixAThousandTimesTheGross", "withdrawals_fee_net",
			exec(`UPDATE withdrawals SET fee = 0, amount_net = amount_gross * 1000 WHERE id = ?`, approved)},
		{"FixANetAboveGrossMinusFee", "withdrawals_fee_net",
			exec(`UPDATE withdrawals SET fee = 1, amount_net = amount_gross WHERE id = ?`, approved)},
		{"RefixTheFee", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET fee = 0, amount_net = amount_gross WHERE id = ?`, fixed)},
		{"RedirectAnApprovedPayout", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET destination = 'bcrt1qmallory' WHERE id = ?`, approved)},
		{"RedirectAFixedPayout", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET destination = 'bcrt1qmallory' WHERE id = ?`, fixed)},
		{"RaiseTheGross", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET amount_gross = amount_gross * 1000 WHERE id = ?`, approved)},
		{"SwitchTheAsset", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET asset = 'USDT_TRC20' WHERE id = ?`, approved)},
		{"SwitchTheUser", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET external_user_id = 'mallory' WHERE id = ?`, approved)},
		{"SwitchTheFeeMode", "withdrawals_instructions_fixed",
			exec(`UPDATE withdrawals SET fee_mode = 'absorb' WHERE id = ?`, approved)},
		{"DeleteAnApprovedPayout", "withdrawals_never_deleted", exec(`DELETE FROM withdrawals WHERE id = ?`, approved)},
		{"ReplaceAnApprovedPayout", "withdrawals_never_deleted",
			exec(`WITH gone AS (DELETE FROM withdrawals WHERE id = ? RETURNING *)
INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross, fee_mode, fee_estimate, approval_mode,
    volume_minute, created_at, updated_at)
SELECT id, external_user_id, asset, status, 'bcrt1qmallory', amount_gross, fee_mode, fee_estimate, approval_mode,
       volume_minute, created_at, updated_at FROM gone`, approved)},
		{"NewPayoutAboveItsGross", "withdrawals_fee_net",
			exec(`INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross, fee_mode, fee_estimate,
    fee, amount_net, volume_minute, created_at, updated_at)
  VALUES (gen_random_uuid(), 'olga', 'BTC', 'approved', 'bcrt1qmallory', 300, 'deduct', 0, 0, 300000, now(), now(), now())`)},
	} {
		err := tc.run()
		require.Error(t, err, tc.name)
		require.True(t, contains(err, tc.want), "%s: %v", tc.name, err)
		require.Equal(t, before, digest(), "%s left the ledger changed", tc.name)
	}
	requireInvariants(t, d)
}

// TestTriggersReadTheLedgersTables: with TEMPORARY given back to the
// runtime role (svc migrate takes it; here, as on a database whose owner
// could not), a temporary ledger_postings still stands in for nothing:
// every function pins its search path and names public.ledger_postings
// (migration 0031), so the balance check and the deferred balanced-entry
// check read the ledger and refuse both attacks of
// TestRuntimeRoleCannotTamper.
func TestTriggersReadTheLedgersTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := dbtest.NewURL(t)
	admin, err := pgx.Connect(ctx, dbtest.AdminURLOf(t, u))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `DO $$ BEGIN EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO `+dbtest.RuntimeRole+`', current_database()); END $$`)
	require.NoError(t, err)
	rt, err := db.Open(ctx, u, 2)
	require.NoError(t, err)
	t.Cleanup(rt.Close)
	d := rt.Bun
	credit(t, d, "BTC", "olga", 1_000, "pay-1")
	var olga, custody int64
	require.NoError(t, d.NewRaw(`SELECT
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'user_available' AND owner = 'olga'),
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'custody')`).Scan(ctx, &olga, &custody))
	var temp bool
	require.NoError(t, d.NewRaw(`SELECT has_database_privilege(current_database(), 'TEMPORARY')`).Scan(ctx, &temp))
	require.True(t, temp)

	err = tempPostingsJustifyABalance(ctx, d, olga)
	require.Error(t, err)
	require.Equal(t, "ledger_balance_posted", constraintOf(err), "%v", err)
	err = oneSidedCreditUnderTempPostings(ctx, d, olga, custody)
	require.Error(t, err)
	require.Equal(t, "ledger_entries_balanced", constraintOf(err), "%v", err)
	avail, _ := balance(t, d, "BTC", "olga")
	require.Equal(t, int64(1_000), avail)
	requireInvariants(t, d)
}

// tempPostingsJustifyABalance moves a user's balance with no posting,
// behind a temporary ledger_postings that holds a posting "justifying" it:
// a trigger that read its table through the session's search path would
// take the session's rows for the ledger's.
func tempPostingsJustifyABalance(ctx context.Context, d bun.IDB, account int64) error {
	return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
		for _, q := range []string{
			`CREATE TEMP TABLE ledger_postings (id bigint, entry_id bigint, account_id bigint, amount bigint, balance_after bigint) ON COMMIT DROP`,
			`INSERT INTO ledger_postings VALUES (9223372036854775807, 0, ?0, 1000000, 1000000)`,
			`UPDATE ledger_accounts SET balance = 1000000 WHERE id = ?0`,
		} {
			if _, err := tx.ExecContext(ctx, q, account); err != nil {
				return err
			}
		}
		return nil
	})
}

// oneSidedCreditUnderTempPostings commits an entry with one posting, a
// credit of 500 to account, while a temporary ledger_postings (a copy of
// the ledger's, plus two rows that balance the entry and carry the
// account's new balance) shadows the real one until the commit: the
// deferred balanced-entry check would count the copy's rows.
func oneSidedCreditUnderTempPostings(ctx context.Context, d bun.IDB, account, counter int64) error {
	return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
		for _, q := range []string{
			`CREATE TEMP TABLE ledger_postings ON COMMIT DROP AS SELECT * FROM public.ledger_postings`,
			`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', 'forged-one-sided')`,
			`INSERT INTO ledger_postings (id, entry_id, account_id, amount, balance_after)
  SELECT 9223372036854775806, e.id, a.id, 500, a.balance + 500 FROM public.ledger_entries e, public.ledger_accounts a
   WHERE e.kind = 'correction' AND e.source_ref = 'forged-one-sided' AND a.id = ?0
  UNION ALL
  SELECT 9223372036854775807, e.id, ?1, -500, NULL FROM public.ledger_entries e
   WHERE e.kind = 'correction' AND e.source_ref = 'forged-one-sided'`,
			`WITH moved AS (UPDATE public.ledger_accounts SET balance = balance + 500 WHERE id = ?0 RETURNING balance)
INSERT INTO public.ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
SELECT e.id, ?0, 500, moved.balance, e.kind, e.source_ref, e.memo, e.created_at
  FROM moved, public.ledger_entries e WHERE e.kind = 'correction' AND e.source_ref = 'forged-one-sided'`,
		} {
			if _, err := tx.ExecContext(ctx, q, account, counter); err != nil {
				return err
			}
		}
		return nil // the deferred check runs at commit
	})
}

// insertWithdrawal stores a BTC withdrawal of user's, approved and queued
// for the submitter, with its fee and net fixed when fee is set (deduct),
// as the withdrawal module writes it, and returns its id.
func insertWithdrawal(t testing.TB, d bun.IDB, user string, gross int64, fee *int64) string {
	t.Helper()
	var id string
	var net *int64
	if fee != nil {
		net = ptr(gross - *fee)
	}
	require.NoError(t, d.NewRaw(`INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross, fee_mode,
    fee_estimate, fee, amount_net, approval_mode, volume_minute, created_at, updated_at)
  VALUES (gen_random_uuid(), ?, 'BTC', 'approved', 'bcrt1qq2z3vq7qq6tv0q5x5y0m0z3l9l5m4z6j5v4e8', ?, 'deduct', 150, ?, ?, 'auto', now(), now(), now())
  RETURNING id`, user, gross, fee, net).Scan(context.Background(), &id))
	return id
}

func ptr[T any](v T) *T { return &v }

func contains(err error, want string) bool {
	return constraintOf(err) == want || strings.Contains(err.Error(), want)
}
