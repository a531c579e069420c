package reconcile_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"svc/modules/asset"
	"svc/modules/reconcile"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/money"
)

// The reconciliation benchmark's book: 100,000 users; 440,000 settled and
// credited deposits spread over the three assets (880,000 postings); 50,000
// withdrawals, of which 40,000 still hold their money (pending approval or
// approved, 80,000 postings) and 10,000 were rejected or refunded (hold and
// release, 40,000 postings). One million postings in all.
const (
	benchUsers       = 100_000
	benchDeposits    = 440_000
	benchOpen        = 40_000
	benchClosed      = 10_000
	benchChunk       = 110_000 // deposits per seeding transaction
	benchPostings    = 2*benchDeposits + 2*benchOpen + 4*benchClosed
	benchReportLimit = 5 * time.Second
)

// BenchmarkReport times the reconciliation report (GET
// /v1/admin/reconciliation: the ledger check with the withdrawals' hold
// check, the deposits' credit check, the custody totals, the three chain
// sources read from the BTCPay and TRON simulators, the report stored in
// the history) on the book above, and fails when one report takes more
// than 5 seconds or is not healthy. The book is built once, with set-based
// SQL, as the service itself would have written it: every deposit credit
// is a deposits row with its credited deposit_payments row pointing at its
// deposit_credit entry, every hold a withdrawals row. The chain sources
// hold exactly the ledger's custody, so a correct report is healthy.
func BenchmarkReport(b *testing.B) {
	e := benchSetup(b)
	ctx := context.Background()
	d := e.App.DB.Bun
	// The book is written as the owner: its set-based SQL goes through
	// temporary tables, which the runtime role may not create.
	owner, err := db.Open(ctx, dbtest.OwnerURL(e.App.Cfg.Database.URL), 2)
	require.NoError(b, err)
	defer owner.Close()
	start := time.Now()
	seedBook(b, owner.Bun, e.Sim.TronPool())
	built := time.Since(start)
	dbtest.VacuumAnalyze(b, e.App.Cfg.Database.URL)
	b.Logf("built %d postings over %d users in %s (VACUUM ANALYZE: %s more)", benchPostings, benchUsers,
		built.Round(time.Second), (time.Since(start) - built).Round(time.Second))

	var postings, users int64
	require.NoError(b, d.NewRaw(`SELECT (SELECT count(*) FROM ledger_postings),
       (SELECT count(DISTINCT owner) FROM ledger_accounts WHERE owner <> '')`).Scan(ctx, &postings, &users))
	require.Equal(b, int64(benchPostings), postings)
	require.Equal(b, int64(benchUsers), users)

	// The wallets hold what the ledger says is in custody.
	var custody []struct {
		Asset string `bun:"asset"`
		Units int64  `bun:"units"`
	}
	require.NoError(b, d.NewRaw(`SELECT a.asset, -coalesce(sum(p.amount), 0) AS units FROM ledger_accounts a
  LEFT JOIN ledger_postings p ON p.account_id = a.id WHERE a.kind = 'custody' GROUP BY a.asset`).Scan(ctx, &custody))
	for _, c := range custody {
		switch c.Asset {
		case asset.BTC:
			require.NoError(b, e.Sim.SetWalletBalance(money.Format(c.Units, 8), "0"))
		case asset.BTCLN:
			e.Sim.SetLightningBalance(c.Units * 1000)
		case asset.USDTTRC20:
			e.Node.SetUSDTBalance(e.Pool[0], c.Units)
		}
	}

	b.Run(fmt.Sprintf("users=%d/postings=%d", users, postings), func(b *testing.B) {
		var worst, total time.Duration
		var rep reconcile.Report
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			r := e.AdminGet("/v1/admin/reconciliation")
			took := time.Since(t0)
			total += took
			worst = max(worst, took)
			require.Equal(b, http.StatusOK, r.Status, string(r.Body))
			rep = reconcile.Report{}
			r.JSON(b, &rep)
			require.True(b, rep.LedgerConsistent, "%+v", rep)
			require.True(b, rep.Healthy, "%+v", rep)
			require.Empty(b, rep.Alerts)
			require.Len(b, rep.Custody, 3)
			for _, l := range rep.Custody {
				require.NotNil(b, l.Difference, l.Asset)
				require.Equal(b, zero(l.Asset), *l.Difference, "%+v", l)
			}
		}
		b.StopTimer()
		b.ReportMetric(total.Seconds()/float64(b.N), "s/report")
		b.ReportMetric(worst.Seconds(), "worst_s")
		b.ReportMetric(float64(postings), "postings")
		b.ReportMetric(float64(users), "users")
		if worst > benchReportLimit {
			b.Fatalf("a reconciliation report over %d postings and %d users took %s, more than %s", postings, users, worst, benchReportLimit)
		}
	})
}

// benchSetup is setup for a benchmark: the service against the BTCPay and
// TRON simulators, every asset enabled, on the real clock.
func benchSetup(b *testing.B) *env {
	b.Helper()
	return start(b, btcpaysim.Start(b, btcpaysim.Options{TickEvery: -1}), nil, func(c *config.Config) { c.LogLevel = "error" })
}

// seedBook writes the benchmark's book in plain SQL, a chunk of deposits
// per transaction and the withdrawals in one more; the ledger's triggers
// check every posting statement and every entry at commit, and the
// deposits' constraints every payment.
func seedBook(b *testing.B, d *bun.DB, pool []string) {
	b.Helper()
	for lo := 0; lo < benchDeposits; lo += benchChunk {
		hi := min(lo+benchChunk, benchDeposits) - 1
		seed(b, d, []stmt{
			// Deposit g: user g mod 100,000, asset g mod 3, made g minutes
			// before the newest; its one payment carries units.
			{`CREATE TEMP TABLE bench_dep ON COMMIT DROP AS
SELECT g, md5('bench-deposit:' || g)::uuid AS id, 'user-' || (g % ?) AS usr,
       (ARRAY['BTC', 'BTC_LN', 'USDT_TRC20'])[g % 3 + 1] AS asset,
       CASE g % 3 WHEN 0 THEN 10000 + (g * 7919) % 5000000
                  WHEN 1 THEN 1000 + (g * 7919) % 500000
                  ELSE 1000000 + (g * 7919) % 500000000 END::bigint AS units,
       CASE g % 3 WHEN 1 THEN 8 WHEN 0 THEN 8 ELSE 6 END AS decimals,
       CASE g % 3 WHEN 1 THEN NULL ELSE md5('tx1:' || g) || md5('tx2:' || g) END AS txid,
       now() - (? - g) * interval '1 minute' AS at
  FROM generate_series(?::bigint, ?::bigint) g`, []any{benchUsers, benchDeposits, lo, hi}},
			{`ALTER TABLE bench_dep ADD payment_id text, ADD ref text`, nil},
			{`UPDATE bench_dep SET payment_id = CASE WHEN txid IS NULL THEN md5('ln:' || g) || md5('hash:' || g) ELSE txid || '-' || (g % 2) END`, nil},
			{`UPDATE bench_dep SET ref = 'deposit:' || id || ':payment:' || payment_id`, nil},
			{`INSERT INTO deposits (id, external_user_id, asset, status, idempotency_key, amount_expected, invoice_id, address,
                      expires_at, monitoring_until, address_reserved_from, address_reserved_until, address_released_at,
                      closed_at, polled_at, created_at, updated_at)
SELECT id, usr, asset, 'settled', 'bench-deposit-' || g, units, 'inv' || substr(md5('inv:' || g), 1, 19),
       CASE asset WHEN 'BTC' THEN 'bcrt1q' || substr(md5('addr:' || g), 1, 32)
                  WHEN 'USDT_TRC20' THEN (?::text[])[g % ? + 1] END,
       at + interval '15 minutes', at + interval '1 day',
       CASE asset WHEN 'USDT_TRC20' THEN at END, CASE asset WHEN 'USDT_TRC20' THEN at + interval '45 minutes' END,
       CASE asset WHEN 'USDT_TRC20' THEN at + interval '46 minutes' END,
       at + interval '5 minutes', at + interval '1 day', at, at + interval '1 day'
  FROM bench_dep ORDER BY g`, []any{pgdialect.Array(pool), len(pool)}},
			{`INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT DISTINCT asset, 'user_available', usr, 0 FROM bench_dep ON CONFLICT DO NOTHING`, nil},
			{`INSERT INTO ledger_entries (kind, asset, source_ref, memo, created_at)
SELECT 'deposit_credit', asset, ref, 'deposit ' || id || ' payment ' || payment_id, at + interval '5 minutes'
  FROM bench_dep ORDER BY g`, nil},
			{`ANALYZE bench_dep, ledger_accounts, ledger_entries`, nil},
			{postingsWithBalances(`SELECT e.id AS entry_id, CASE WHEN side = 0 THEN u.id ELSE c.id END AS account_id,
       CASE WHEN side = 0 THEN s.units ELSE -s.units END AS amount, side AS ord
  FROM bench_dep s
  JOIN ledger_entries e ON e.kind = 'deposit_credit' AND e.source_ref = s.ref
  JOIN ledger_accounts u ON u.owner = s.usr AND u.asset = s.asset AND u.kind = 'user_available'
  JOIN ledger_accounts c ON c.owner = '' AND c.asset = s.asset AND c.kind = 'custody'
 CROSS JOIN (VALUES (0), (1)) x (side)`), nil},
			{`INSERT INTO deposit_payments (deposit_id, payment_id, txid, amount, units, processor_status, received_at,
                              after_expiration, credited, credited_at, resolved_by, ledger_entry_id, created_at, updated_at)
SELECT s.id, s.payment_id, s.txid, round(s.units / 10::numeric ^ s.decimals, s.decimals)::text, s.units, 'Settled',
       s.at + interval '1 minute', false, true, s.at + interval '5 minutes', 'auto', e.id, s.at + interval '1 minute', s.at + interval '5 minutes'
  FROM bench_dep s JOIN ledger_entries e ON e.kind = 'deposit_credit' AND e.source_ref = s.ref
 ORDER BY s.g`, nil},
		})
	}
	// Withdrawal w: user w, asset w mod 3 (so user w's deposit w covers
	// it); the first 40,000 pending approval or approved, the rest rejected
	// or refunded.
	seed(b, d, []stmt{
		{`CREATE TEMP TABLE bench_wd ON COMMIT DROP AS
SELECT w, md5('bench-withdrawal:' || w)::uuid AS id, 'user-' || w AS usr,
       (ARRAY['BTC', 'BTC_LN', 'USDT_TRC20'])[w % 3 + 1] AS asset,
       CASE w % 3 WHEN 0 THEN 5000 + w % 1000 WHEN 1 THEN 500 + w % 400 ELSE 500000 + w % 1000 END::bigint AS gross,
       CASE WHEN w < ? THEN (ARRAY['pending_approval', 'approved'])[w % 2 + 1]
            ELSE (ARRAY['rejected', 'refunded'])[w % 2 + 1] END AS status,
       now() - (? - w) * interval '1 minute' AS at
  FROM generate_series(0, ? - 1) w`, []any{benchOpen, benchOpen + benchClosed, benchOpen + benchClosed}},
		{`INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross, fee_mode, fee_estimate,
                         approval_mode, approval_reason, volume_minute, rejected_by, failure_reason, idempotency_key, created_at, updated_at)
SELECT id, usr, asset, status,
       CASE asset WHEN 'BTC' THEN 'bcrt1q' || substr(md5('dest:' || w), 1, 32)
                  WHEN 'BTC_LN' THEN 'lnbcrt1' || md5('inv1:' || w) || md5('inv2:' || w)
                  ELSE 'T' || substr(md5('dest:' || w), 1, 33) END,
       gross, 'deduct', CASE asset WHEN 'USDT_TRC20' THEN 0 ELSE 200 END,
       CASE status WHEN 'approved' THEN 'auto' WHEN 'pending_approval' THEN 'manual' END,
       CASE status WHEN 'pending_approval' THEN 'above the auto-approval limit' END,
       date_trunc('minute', at), CASE status WHEN 'rejected' THEN 'bench-operator' END,
       CASE status WHEN 'refunded' THEN 'the processor refused the payout' END,
       'bench-withdrawal-' || w, at, at + interval '1 minute'
  FROM bench_wd ORDER BY w`, nil},
		{`INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT DISTINCT asset, 'user_hold', usr, 0 FROM bench_wd ON CONFLICT DO NOTHING`, nil},
		{`INSERT INTO ledger_entries (kind, asset, source_ref, memo, created_at)
SELECT k, asset, id::text, CASE k WHEN 'withdrawal_hold' THEN 'withdrawal hold' ELSE 'withdrawal ' || status END, at
  FROM bench_wd, unnest(CASE WHEN status IN ('rejected', 'refunded') THEN ARRAY['withdrawal_hold', 'withdrawal_release']
                             ELSE ARRAY['withdrawal_hold'] END) k
 ORDER BY w, k`, nil},
		{`ANALYZE bench_wd, ledger_accounts, ledger_entries`, nil},
		// hold: available -gross, hold +gross; release: the reverse.
		{postingsWithBalances(`SELECT e.id AS entry_id, CASE WHEN (side = 0) = (e.kind = 'withdrawal_hold') THEN a.id ELSE h.id END AS account_id,
       CASE WHEN side = 0 THEN -s.gross ELSE s.gross END AS amount, side AS ord
  FROM bench_wd s
  JOIN ledger_entries e ON e.kind IN ('withdrawal_hold', 'withdrawal_release') AND e.source_ref = s.id::text
  JOIN ledger_accounts a ON a.owner = s.usr AND a.asset = s.asset AND a.kind = 'user_available'
  JOIN ledger_accounts h ON h.owner = s.usr AND h.asset = s.asset AND h.kind = 'user_hold'
 CROSS JOIN (VALUES (0), (1)) x (side)`), nil},
	})
}

// postingsWithBalances is the statement that inserts the postings src
// selects (entry_id, account_id, amount, ord: the order within the entry)
// and moves the materialized balances by them, each user posting with its
// running balance and its entry's display fields (migration 0025), in id
// order: the database refuses a balance that differs from its postings at
// the end of any statement (migration 0014), so the two cannot be
// separate statements.
func postingsWithBalances(src string) string {
	return `WITH src AS (` + src + `),
p AS (INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
  SELECT s.entry_id, s.account_id, s.amount,
         CASE WHEN a.balance IS NOT NULL THEN a.balance + sum(s.amount) OVER (PARTITION BY s.account_id ORDER BY s.entry_id) END,
         CASE WHEN a.balance IS NOT NULL THEN e.kind END, CASE WHEN a.balance IS NOT NULL THEN e.source_ref END,
         CASE WHEN a.balance IS NOT NULL THEN e.memo END, CASE WHEN a.balance IS NOT NULL THEN e.created_at END
    FROM src s JOIN ledger_accounts a ON a.id = s.account_id JOIN ledger_entries e ON e.id = s.entry_id
   ORDER BY s.entry_id, s.ord
  RETURNING account_id, amount)
UPDATE ledger_accounts a SET balance = a.balance + x.total
  FROM (SELECT account_id, sum(amount) AS total FROM p GROUP BY account_id) x
 WHERE a.id = x.account_id AND a.balance IS NOT NULL`
}

type stmt struct {
	sql  string
	args []any
}

func seed(b *testing.B, d *bun.DB, stmts []stmt) {
	b.Helper()
	err := db.RunInTx(context.Background(), d, func(ctx context.Context, tx bun.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s.sql, s.args...); err != nil {
				return fmt.Errorf("%w\n%s", err, s.sql)
			}
		}
		return nil
	})
	require.NoError(b, err)
}
