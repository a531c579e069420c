package ledger_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/ledger"
)

// rowCount returns how many rows query counts.
func rowCount(t *testing.T, e *apptest.Env, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.App.DB.Bun.QueryRowContext(context.Background(), query, args...).Scan(&n))
	return n
}

// TestCorrectionHTTP: POST /v1/admin/ledger/corrections posts a balanced
// correction with its audit record, for admin keys only, idempotently;
// what it refuses (a missing memo, unbalanced lines, an account it may not
// touch, a balance that would go negative) is a 422 naming the field, and
// nothing is written.
func TestCorrectionHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	_, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 10_000, "deposit:test:payment:1", "test")
	require.NoError(t, err)
	entries := func() int { return rowCount(t, e, `SELECT count(*) FROM ledger_entries`) }
	audits := func() int { return rowCount(t, e, `SELECT count(*) FROM audit_log WHERE action = 'ledger.correct'`) }
	line := func(account, user, dir, amount string) map[string]any {
		l := map[string]any{"account": account, "direction": dir, "amount": amount}
		if user != "" {
			l["external_user_id"] = user
		}
		return l
	}
	fee := map[string]any{"asset": "BTC", "memo": "a fee the processor paid and did not report", "reference": "fee-1",
		"lines": []any{line("network_fees", "", "debit", "300"), line("custody", "", "credit", "300")}}

	// Admin only.
	r := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/ledger/corrections", Body: fee})
	require.Equal(t, http.StatusForbidden, r.Status, string(r.Body))
	r = e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/ledger/corrections", Body: fee, Key: "-"})
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	// An Idempotency-Key, as every mutating call.
	r = e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/ledger/corrections", Body: fee, Key: e.Admin, Idem: "-"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	before := entries()

	// A dry run shows the entry and the balances, and writes nothing.
	dry := map[string]any{"dry_run": true}
	for k, v := range fee {
		dry[k] = v
	}
	r = e.AdminPost("/v1/admin/ledger/corrections", dry)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var b ledger.BookingView
	r.JSON(t, &b)
	require.True(t, b.DryRun)
	require.Nil(t, b.Entries[0].EntryID)
	require.Equal(t, "correction:fee-1", b.Entries[0].SourceRef)
	require.Equal(t, "0.00010000", *b.Lines[1].BalanceBefore, "custody holds the deposit")
	require.Equal(t, "0.00009700", *b.Lines[1].BalanceAfter)
	require.Equal(t, before, entries())

	// Posted, with its audit record; the same key again replays it.
	r = e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/ledger/corrections", Body: fee, Key: e.Admin, Idem: "corr-1"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r.JSON(t, &b)
	require.False(t, b.DryRun)
	require.NotNil(t, b.Entries[0].EntryID)
	require.NotNil(t, b.AuditID)
	require.Equal(t, "debit", b.Lines[0].Direction)
	require.Equal(t, "0.00000300", *b.Lines[0].BalanceAfter)
	require.Equal(t, before+1, entries())
	require.Equal(t, 1, audits())
	var actor, target string
	require.NoError(t, e.App.DB.Bun.QueryRowContext(ctx, `SELECT actor, target FROM audit_log WHERE id = ?`, *b.AuditID).Scan(&actor, &target))
	require.Regexp(t, `^key_`, actor)
	require.Equal(t, "correction:fee-1", target)

	r2 := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/ledger/corrections", Body: fee, Key: e.Admin, Idem: "corr-1"})
	require.Equal(t, http.StatusCreated, r2.Status, string(r2.Body))
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(r.Body), string(r2.Body))
	// The same key with another body is 422.
	other := map[string]any{"asset": "BTC", "memo": "other", "lines": fee["lines"]}
	r2 = e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/ledger/corrections", Body: other, Key: e.Admin, Idem: "corr-1"})
	require.Equal(t, http.StatusUnprocessableEntity, r2.Status, string(r2.Body))
	// The same reference under another key: nothing changes (200,
	// replayed); with other lines, 409.
	r2 = e.AdminPost("/v1/admin/ledger/corrections", fee)
	require.Equal(t, http.StatusOK, r2.Status, string(r2.Body))
	r2.JSON(t, &b)
	require.True(t, b.Replayed)
	require.Nil(t, b.AuditID)
	changed := map[string]any{"asset": "BTC", "memo": "x", "reference": "fee-1",
		"lines": []any{line("network_fees", "", "debit", "301"), line("custody", "", "credit", "301")}}
	r2 = e.AdminPost("/v1/admin/ledger/corrections", changed)
	require.Equal(t, http.StatusConflict, r2.Status, string(r2.Body))
	require.Equal(t, before+1, entries())
	require.Equal(t, 1, audits())

	// Refusals: 422 with the field, nothing written.
	for _, tc := range []struct {
		name string
		body map[string]any
		loc  []any
		typ  string
	}{
		{"no memo", map[string]any{"asset": "BTC", "lines": fee["lines"]}, []any{"body", "memo"}, "missing"},
		{"blank memo", map[string]any{"asset": "BTC", "memo": "  ", "lines": fee["lines"]}, []any{"body", "memo"}, "missing"},
		{"unbalanced", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("network_fees", "", "debit", "300"), line("custody", "", "credit", "200")}}, []any{"body", "lines"}, "unbalanced"},
		{"user_hold", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("user_hold", "ann", "credit", "300"), line("custody", "", "debit", "300")}}, []any{"body", "lines", float64(0), "account"}, "account_refused"},
		{"in_flight", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("in_flight", "", "debit", "300"), line("custody", "", "credit", "300")}}, []any{"body", "lines", float64(0), "account"}, "account_refused"},
		{"user below zero", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("user_available", "ann", "debit", "10001"), line("fee_income", "", "credit", "10001")}}, []any{"body", "lines", float64(0), "amount"}, "negative_balance"},
		{"custody below zero", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("network_fees", "", "debit", "9701"), line("custody", "", "credit", "9701")}}, []any{"body", "lines", float64(1), "amount"}, "negative_balance"},
		{"fee income below zero", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("fee_income", "", "debit", "1"), line("user_available", "ann", "credit", "1")}}, []any{"body", "lines", float64(0), "amount"}, "negative_balance"},
		{"bad direction", map[string]any{"asset": "BTC", "memo": "m",
			"lines": []any{line("fee_income", "", "sideways", "1"), line("custody", "", "credit", "1")}}, []any{"body", "lines", float64(0), "direction"}, "enum"},
		{"one line", map[string]any{"asset": "BTC", "memo": "m", "lines": []any{line("fee_income", "", "debit", "1")}}, []any{"body", "lines"}, "lines"},
	} {
		r := e.AdminPost("/v1/admin/ledger/corrections", tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tc.name, r.Body)
		fe := r.FieldErrors(t)
		require.Equal(t, tc.loc, fe[0]["loc"], "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.typ, fe[0]["type"], "%s: %s", tc.name, r.Body)
	}
	r = e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "DOGE", "memo": "m", "lines": fee["lines"]})
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
	require.Equal(t, before+1, entries())
	require.Equal(t, 1, audits())

	// A user credit is audited like any line, and shows in the user's history.
	r = e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "BTC", "memo": "goodwill for a late payout",
		"lines": []any{line("fee_income", "", "debit", "0"), line("user_available", "ann", "credit", "0")}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "zero amounts: %s", r.Body)
	r = e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "BTC", "memo": "deposit the processor missed",
		"lines": []any{line("custody", "", "debit", "500"), line("user_available", "ann", "credit", "500")}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = e.Get("/v1/users/ann/balances")
	require.Contains(t, string(r.Body), `"available":"0.00010500"`)
	require.Equal(t, 2, audits())
}

// TestTransferHTTP: POST /v1/admin/ledger/transfers books a channel open as
// two balanced entries with one audit record; another pair of assets, or
// more than the sending custody holds, is 422.
func TestTransferHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	_, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 1_000_000, "deposit:test:payment:1", "test")
	require.NoError(t, err)
	open := map[string]any{"from": "BTC", "to": "BTC_LN", "amount": "600000", "network_fee": "250", "reference": "fundingtx1", "memo": "channel to the hub"}
	r := e.AdminPost("/v1/admin/ledger/transfers", open)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var b ledger.BookingView
	r.JSON(t, &b)
	require.Len(t, b.Entries, 2)
	require.Equal(t, "transfer-out:fundingtx1", b.Entries[0].SourceRef)
	require.Equal(t, "transfer-in:fundingtx1", b.Entries[1].SourceRef)
	totals := map[string]ledger.Totals{}
	list, err := ledger.AssetTotals(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	for _, x := range list {
		totals[x.Asset] = x
	}
	require.Equal(t, int64(1_000_000-600_250), totals["BTC"].Custody)
	require.Equal(t, int64(250), totals["BTC"].NetworkFees)
	require.Equal(t, int64(600_000), totals["BTC"].Transfer)
	require.Equal(t, int64(600_000), totals["BTC_LN"].Custody)
	require.Equal(t, int64(-600_000), totals["BTC_LN"].Transfer)
	require.Equal(t, 1, rowCount(t, e, `SELECT count(*) FROM audit_log WHERE action = 'ledger.transfer' AND target = 'fundingtx1'`))

	r = e.AdminPost("/v1/admin/ledger/transfers", open)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &b)
	require.True(t, b.Replayed)

	bad := map[string]any{"from": "BTC", "to": "USDT_TRC20", "amount": "1", "reference": "x", "memo": "m"}
	r = e.AdminPost("/v1/admin/ledger/transfers", bad)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "transfer_pair", r.FieldErrors(t)[0]["type"])
	tooMuch := map[string]any{"from": "BTC", "to": "BTC_LN", "amount": "399750", "network_fee": "1", "reference": "fundingtx2", "memo": "m"}
	r = e.AdminPost("/v1/admin/ledger/transfers", tooMuch)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "negative_balance", r.FieldErrors(t)[0]["type"])
	r = e.AdminPost("/v1/admin/ledger/transfers", map[string]any{"from": "BTC", "to": "BTC_LN", "amount": "1", "reference": "y"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, []any{"body", "memo"}, r.FieldErrors(t)[0]["loc"])
	require.Equal(t, 2, rowCount(t, e, `SELECT count(*) FROM ledger_entries WHERE source_ref LIKE 'transfer-%'`))
	// The ledger check stays clean.
	rep, err := ledger.Check(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "%+v", rep)
}
