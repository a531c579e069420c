package ledger_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// TestDatabaseRefuses checks the rules the database enforces by itself,
// with SQL that goes around the ledger package, as the schema owner: the
// triggers hold even for the role that could switch them off
// (TestRuntimeRoleCannotTamper shows the runtime role cannot even try).
func TestDatabaseRefuses(t *testing.T) {
	t.Parallel()
	d := newDBAs(t, 4, dbtest.OwnerURL)
	ctx := context.Background()
	p := credit(t, d, "BTC", "ivan", 1_000, "pay-1")
	var custody, feeIncome, ivan, usdtCustody int64
	require.NoError(t, d.NewRaw(`SELECT
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'custody'),
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'fee_income'),
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'user_available' AND owner = 'ivan'),
  (SELECT id FROM ledger_accounts WHERE asset = 'USDT_TRC20' AND kind = 'custody')`).Scan(ctx, &custody, &feeIncome, &ivan, &usdtCustody))

	exec := func(query string, args ...any) error {
		return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := tx.ExecContext(ctx, query, args...)
			return err
		})
	}
	newEntry := `INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', ?, ?) RETURNING id`
	// inEntry writes a new BTC entry and then runs postings, with the new
	// entry's id for each entryID{} argument, in one transaction.
	inEntry := func(ref, postings string, args ...any) func() error {
		return func() error {
			return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
				var id int64
				if err := tx.NewRaw(newEntry, "BTC", ref).Scan(ctx, &id); err != nil {
					return err
				}
				withID := slices.Clone(args)
				for i, a := range withID {
					if _, ok := a.(entryID); ok {
						withID[i] = id
					}
				}
				_, err := tx.ExecContext(ctx, postings, withID...)
				return err
			})
		}
	}
	for _, tc := range []struct {
		name, want string
		run        func() error
	}{
		{"UpdateEntry", "append-only", func() error { return exec(`UPDATE ledger_entries SET memo = 'x' WHERE id = ?`, p.ID) }},
		{"DeleteEntry", "append-only", func() error { return exec(`DELETE FROM ledger_entries WHERE id = ?`, p.ID) }},
		{"TruncateEntries", "append-only", func() error { return exec(`TRUNCATE ledger_entries`) }},
		{"UpdatePosting", "append-only", func() error {
			return exec(`UPDATE ledger_postings SET amount = amount + 1 WHERE entry_id = ?`, p.ID)
		}},
		{"DeletePosting", "append-only", func() error { return exec(`DELETE FROM ledger_postings WHERE entry_id = ?`, p.ID) }},
		{"TruncatePostings", "append-only", func() error { return exec(`TRUNCATE ledger_postings`) }},
		{"DeleteAccount", "append-only", func() error { return exec(`DELETE FROM ledger_accounts WHERE id = ?`, ivan) }},
		{"RenameAccount", "append-only", func() error { return exec(`UPDATE ledger_accounts SET owner = 'mallory' WHERE id = ?`, ivan) }},
		{"NegativeUserBalance", "ledger_accounts_balance_nonneg", func() error {
			return exec(`UPDATE ledger_accounts SET balance = -1 WHERE id = ?`, ivan)
		}},
		{"BalanceOnSystemAccount", "ledger_accounts_materialized", func() error {
			return exec(`UPDATE ledger_accounts SET balance = 5 WHERE id = ?`, custody)
		}},
		// The deferred trigger refuses it at commit.
		{"UnbalancedEntry", "ledger_entries_balanced", inEntry("bad-1", `INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 5), (?, ?, -4)`, entryID{}, feeIncome, entryID{}, custody)},
		// Balances move only with their postings (migration 0014).
		{"BalanceMovedByHand", "ledger_balance_posted", func() error {
			return exec(`UPDATE ledger_accounts SET balance = balance + 1000 WHERE id = ?`, ivan)
		}},
		{"NewAccountWithABalance", "ledger_balance_posted", func() error {
			return exec(`INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'mallory', 1000)`)
		}},
		{"UpsertedBalance", "ledger_balance_posted", func() error {
			return exec(`INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'ivan', 1000)
  ON CONFLICT (owner, asset, kind) DO UPDATE SET balance = ledger_accounts.balance + EXCLUDED.balance`)
		}},
		{"PostingWithoutItsBalance", "ledger_balance_posted", inEntry("bad-8", `INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_at)
  SELECT e.id, v.a, v.amount, v.after, CASE WHEN v.usr THEN e.kind END, CASE WHEN v.usr THEN e.source_ref END, CASE WHEN v.usr THEN e.created_at END
    FROM ledger_entries e, (VALUES (?::bigint, 5, 1005, true), (?::bigint, -5, NULL, false)) v (a, amount, after, usr)
   WHERE e.id = ?`, ivan, custody, entryID{})},
		// The balance moves by 5 with a posting of 5, but the posting claims a
		// running balance the account's history does not give.
		{"PostingOffTheChain", "ledger_balance_posted", inEntry("bad-9", `WITH u AS (UPDATE ledger_accounts SET balance = 2005 WHERE id = ? RETURNING balance)
  INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_at)
  SELECT e.id, ?, 5, (SELECT balance FROM u), e.kind, e.source_ref, e.created_at FROM ledger_entries e WHERE e.id = ?
   UNION ALL SELECT ?, ?, -5, NULL::bigint, NULL, NULL, NULL`, ivan, ivan, entryID{}, entryID{}, custody)},
		{"UserPostingWithoutRunningBalance", "ledger_balance_posted", inEntry("bad-10", `WITH u AS (UPDATE ledger_accounts SET balance = balance + 5 WHERE id = ? RETURNING balance)
  INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_at)
  SELECT e.id, ?, 5, NULL::bigint, e.kind, e.source_ref, e.created_at FROM u, ledger_entries e WHERE e.id = ?
   UNION ALL SELECT ?, ?, -5, NULL::bigint, NULL, NULL, NULL`, ivan, ivan, entryID{}, entryID{}, custody)},
		{"EntryWithoutPostings", "ledger_entries_balanced", func() error { return exec(newEntry, "BTC", "bad-2") }},
		{"PostingIntoAnEarlierEntry", "ledger_postings_check", func() error {
			return exec(`INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 1), (?, ?, -1)`, p.ID, ivan, p.ID, custody)
		}},
		{"PostingToAnotherAssetsAccount", "ledger_postings_check", inEntry("bad-4", `INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 1), (?, ?, -1)`, entryID{}, custody, entryID{}, usdtCustody)},
		{"PostingToNoAccount", "ledger_postings_check", inEntry("bad-5", `INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, 999999, 1), (?, ?, -1)`, entryID{}, entryID{}, custody)},
		{"ZeroPosting", "ledger_postings_amount_check", inEntry("bad-6", `INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 0)`, entryID{}, custody)},
		{"DuplicateFact", "ledger_entries_source", func() error {
			return exec(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('deposit_credit', 'BTC', 'pay-1')`)
		}},
		{"UnknownEntryKind", "ledger_entries_kind_check", func() error {
			return exec(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('gift', 'BTC', 'x')`)
		}},
		// The rules of one column are its type (migration 0029): each
		// still refuses, under its constraint's old name.
		{"EmptySourceRef", "ledger_entries_source_ref_check", func() error {
			return exec(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('deposit_credit', 'BTC', '')`)
		}},
		{"LongMemo", "ledger_entries_memo_check", func() error {
			return exec(`INSERT INTO ledger_entries (kind, asset, source_ref, memo) VALUES ('deposit_credit', 'BTC', 'x', repeat('m', 2001))`)
		}},
		{"UnknownAccountKind", "ledger_accounts_kind_check", func() error {
			return exec(`INSERT INTO ledger_accounts (asset, kind, owner) VALUES ('BTC', 'treasure', '')`)
		}},
	} {
		err := tc.run()
		require.Error(t, err, tc.name)
		require.True(t, strings.Contains(err.Error(), tc.want) || constraintOf(err) == tc.want, "%s: %v", tc.name, err)
	}

	// One posting only.
	err := inEntry("bad-7", `INSERT INTO ledger_postings (entry_id, account_id, amount) VALUES (?, ?, 5)`, entryID{}, custody)()
	require.True(t, db.IsCheckViolation(err, "ledger_entries_balanced"), "%v", err)

	// Nothing of the above got in.
	require.Equal(t, int64(1), count(t, d, `SELECT count(*) FROM ledger_entries`))
	require.Equal(t, int64(2), count(t, d, `SELECT count(*) FROM ledger_postings`))
	avail, _ := balance(t, d, "BTC", "ivan")
	require.Equal(t, int64(1_000), avail)
	requireInvariants(t, d)
}

// entryID stands for the id of the entry inEntry writes.
type entryID struct{}

func constraintOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.ConstraintName
	}
	return ""
}

// TestCheckFindsCorruption corrupts the ledger behind the triggers' back
// (as a superuser could) and expects the check to name what is wrong.
func TestCheckFindsCorruption(t *testing.T) {
	t.Parallel()
	d := newDBAs(t, 4, func(u string) string { return dbtest.AdminURLOf(t, u) })
	credit(t, d, "BTC", "judy", 1_000, "pay-1")
	credit(t, d, "BTC", "ken", 500, "pay-2")
	_, err := hold(t, d, "BTC", "ken", 200, "wd-1")
	require.NoError(t, err)
	r := fullCheck(t, d)
	require.True(t, r.LedgerConsistent)
	require.Empty(t, r.MaterializedVsDerivedDrifts)
	require.Empty(t, r.UnbalancedEntries)
	require.Empty(t, r.NegativeBalances)
	require.Equal(t, int64(6), r.Postings)
	require.Equal(t, int64(3), r.Entries)

	// A balance corrupted by hand with the triggers off (with them on, the
	// database refuses it: TestDatabaseRefuses): it no longer matches the
	// postings.
	behindTriggers(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = 'judy' AND kind = 'user_available'`)
		return err
	})
	r = fullCheck(t, d)
	require.False(t, r.LedgerConsistent)
	require.Len(t, r.MaterializedVsDerivedDrifts, 1)
	require.Contains(t, r.MaterializedVsDerivedDrifts[0], `BTC user_available of "judy"`)
	require.Contains(t, r.MaterializedVsDerivedDrifts[0], "materialized 0.00001001, postings sum 0.00001000")
	require.Empty(t, r.UnbalancedEntries)

	// Postings written with the triggers off: an unbalanced entry that also
	// drives ken's held balance negative by its postings.
	behindTriggers(t, d, func(ctx context.Context, tx bun.Tx) error {
		var id int64
		if err := tx.NewRaw(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', 'forged') RETURNING id`).Scan(ctx, &id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger_postings (entry_id, account_id, amount, entry_kind, entry_ref, entry_at)
  SELECT ?, id, -300, 'correction', 'forged', (SELECT created_at FROM ledger_entries WHERE source_ref = 'forged')
    FROM ledger_accounts WHERE owner = 'ken' AND kind = 'user_hold'`, id)
		return err
	})
	r = fullCheck(t, d)
	require.False(t, r.LedgerConsistent)
	require.Len(t, r.UnbalancedEntries, 1)
	require.Contains(t, r.UnbalancedEntries[0], "correction forged, BTC): 1 postings sum to -0.00000300")
	require.Len(t, r.MaterializedVsDerivedDrifts, 2)
	require.Contains(t, r.MaterializedVsDerivedDrifts[1], `BTC user_hold of "ken"`)
	require.Len(t, r.NegativeBalances, 1)
	require.Contains(t, r.NegativeBalances[0], `BTC user_hold of "ken"`)
	require.Contains(t, r.NegativeBalances[0], "postings sum -0.00000100")

	// An entry without postings, and a balanced entry whose second posting
	// is on another asset's account.
	behindTriggers(t, d, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', 'empty')`); err != nil {
			return err
		}
		var id int64
		if err := tx.NewRaw(`INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('correction', 'BTC', 'cross') RETURNING id`).Scan(ctx, &id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger_postings (entry_id, account_id, amount)
  SELECT ?, id, CASE WHEN asset = 'BTC' THEN 5 ELSE -5 END FROM ledger_accounts WHERE kind = 'custody' AND asset IN ('BTC', 'USDT_TRC20')`, id)
		return err
	})
	r = fullCheck(t, d)
	require.Len(t, r.UnbalancedEntries, 3, "%q", r.UnbalancedEntries)
	require.Contains(t, r.UnbalancedEntries[1], "(correction empty, BTC) has no postings")
	require.Contains(t, r.UnbalancedEntries[2], "(correction cross, BTC): posting")
	require.Contains(t, r.UnbalancedEntries[2], "of asset USDT_TRC20")
}
