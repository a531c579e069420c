package ledger_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/audit"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/config"
)

// auditActors lists the actors of the audit trail's entries of action,
// newest first, through GET /v1/admin/audit.
func auditActors(t *testing.T, e *apptest.Env, action string) []string {
	t.Helper()
	r := e.AdminGet("/v1/admin/audit?action=" + action)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var l audit.ListView
	r.JSON(t, &l)
	out := []string{}
	for _, x := range l.Entries {
		out = append(out, x.Actor)
	}
	return out
}

// signedPost posts body to path with the admin key and, when x is not
// nil, s's signature of x.
func signedPost(t *testing.T, e *apptest.Env, path string, body any, s *operator.Signer, x *operator.Expect) *apptest.Response {
	t.Helper()
	var h map[string]string
	if x != nil {
		h = operatortest.Header(t, s, *x, time.Now())
	}
	return e.Do(apptest.Req{Method: "POST", Path: path, Body: body, Key: e.Admin, Header: h})
}

// TestCorrectionSigned: POST /v1/admin/ledger/corrections with an admin's
// signature of the asset, every line in display units, the memo and the
// reference posts the correction, as op:NAME in the audit trail; the same
// statement again is 401 (a replayed booking's too), a statement of other
// lines 403, an approver's 403, and nothing is posted; with
// OPERATOR_SIGNATURES=required an unsigned correction is 401 and a dry run
// needs no signature.
func TestCorrectionSigned(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	_, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 10_000, "deposit:test:payment:1", "test")
	require.NoError(t, err)
	team := operatortest.Team(t, e.App.DB.Bun, time.Now, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver})
	const path = "/v1/admin/ledger/corrections"
	entries := func() int { return rowCount(t, e, `SELECT count(*) FROM ledger_entries WHERE kind = 'correction'`) }
	body := map[string]any{"asset": "BTC", "memo": "goodwill", "reference": "gw-1", "lines": []any{
		map[string]any{"account": "fee_income", "direction": "debit", "amount": "0"},
		map[string]any{"account": "user_available", "external_user_id": "ann", "direction": "credit", "amount": "0"}}}
	// Fee income to give: the processor's fee, booked unsigned.
	r := e.AdminPost(path, map[string]any{"asset": "BTC", "memo": "fee", "lines": []any{
		map[string]any{"account": "user_available", "external_user_id": "ann", "direction": "debit", "amount": "1000"},
		map[string]any{"account": "fee_income", "direction": "credit", "amount": "1000"}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	body["lines"].([]any)[0].(map[string]any)["amount"] = "300"
	body["lines"].([]any)[1].(map[string]any)["amount"] = "300"
	c := ledger.OperatorCorrection{Asset: "BTC", Memo: "goodwill", Reference: "gw-1", Lines: []ledger.Line{
		{Account: ledger.System(ledger.FeeIncome), Amount: -300}, {Account: ledger.User(ledger.UserAvailable, "ann"), Amount: 300}}}
	x := ledger.CorrectionExpect(c, 8)
	require.Equal(t, operator.Expect{Action: ledger.AuditCorrect, Resource: "BTC", Role: operator.Admin, Facts: map[string]string{
		"asset": "BTC", "memo": "goodwill", "reference": "gw-1",
		"line.1": "debit fee_income=0.00000300", "line.2": "credit user_available:ann=0.00000300"}}, x)
	before := entries()

	more := c
	more.Lines = []ledger.Line{{Account: ledger.System(ledger.FeeIncome), Amount: -301}, {Account: ledger.User(ledger.UserAvailable, "ann"), Amount: 301}}
	other := ledger.CorrectionExpect(more, 8)
	r = signedPost(t, e, path, body, team["ada"], &other)
	require.Equal(t, http.StatusForbidden, r.Status, "signed 301 sat, asked 300: %s", r.Body)
	require.Contains(t, r.Map(t)["detail"], "line.1")
	r = signedPost(t, e, path, body, team["bob"], &x)
	require.Equal(t, http.StatusForbidden, r.Status, "an approver does not correct the ledger: %s", r.Body)
	require.Equal(t, before, entries())

	h := operatortest.Header(t, team["ada"], x, time.Now())
	r = e.Do(apptest.Req{Method: "POST", Path: path, Body: body, Key: e.Admin, Header: h})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, before+1, entries())
	require.Equal(t, "op:ada", auditActors(t, e, ledger.AuditCorrect)[0])
	// The same statement again: the booking is a replay, which changes
	// nothing, and the statement was accepted once.
	r = e.Do(apptest.Req{Method: "POST", Path: path, Body: body, Key: e.Admin, Header: h})
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	// Without a reference, each booking is a new one: a statement of it is
	// accepted once.
	delete(body, "reference")
	c.Reference = ""
	x = ledger.CorrectionExpect(c, 8)
	h = operatortest.Header(t, team["ada"], x, time.Now())
	r = e.Do(apptest.Req{Method: "POST", Path: path, Body: body, Key: e.Admin, Header: h})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = e.Do(apptest.Req{Method: "POST", Path: path, Body: body, Key: e.Admin, Header: h})
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	require.Equal(t, before+2, entries())
	require.Equal(t, []string{"op:ada", "op:ada", e.AdminKeyID}, auditActors(t, e, ledger.AuditCorrect))

	req := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	_, err = ledger.CreditDeposit(ctx, req.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 10_000, "deposit:test:payment:1", "test")
	require.NoError(t, err)
	fee := map[string]any{"asset": "BTC", "memo": "fee", "lines": []any{
		map[string]any{"account": "network_fees", "direction": "debit", "amount": "300"},
		map[string]any{"account": "custody", "direction": "credit", "amount": "300"}}}
	r = req.AdminPost(path, fee)
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	fee["dry_run"] = true
	r = req.AdminPost(path, fee)
	require.Equal(t, http.StatusOK, r.Status, "a dry run needs no signature: %s", r.Body)
}

// TestTransferSigned: POST /v1/admin/ledger/transfers with an admin's
// signature of from, to, the amount, the network fee, the reference and
// the memo books the transfer, as op:NAME in the audit trail; the same
// statement again is 401, a statement of another fee 403, an approver's
// 403; with OPERATOR_SIGNATURES=required an unsigned transfer is 401.
func TestTransferSigned(t *testing.T) {
	t.Parallel()
	e := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	ctx := context.Background()
	_, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder("ann"), 1_000_000, "deposit:test:payment:1", "test")
	require.NoError(t, err)
	team := operatortest.Team(t, e.App.DB.Bun, time.Now, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver})
	const path = "/v1/admin/ledger/transfers"
	open := map[string]any{"from": "BTC", "to": "BTC_LN", "amount": "600000", "reference": "fundingtx1", "memo": "channel to the hub"}
	t1 := ledger.CustodyTransfer{From: "BTC", To: "BTC_LN", Amount: 600_000, Reference: "fundingtx1", Memo: "channel to the hub"}
	x := ledger.TransferExpect(t1, 8, 8)
	require.Equal(t, operator.Expect{Action: ledger.AuditTransfer, Resource: "fundingtx1", Role: operator.Admin, Facts: map[string]string{
		"from": "BTC", "to": "BTC_LN", "amount": "0.00600000", "network_fee": "0.00000000", "reference": "fundingtx1", "memo": "channel to the hub"}}, x)
	transfers := func() int {
		return rowCount(t, e, `SELECT count(*) FROM ledger_entries WHERE source_ref LIKE 'transfer-%'`)
	}

	r := e.AdminPost(path, open)
	require.Equal(t, http.StatusUnauthorized, r.Status, "unsigned: %s", r.Body)
	withFee := t1
	withFee.NetworkFee = 250
	other := ledger.TransferExpect(withFee, 8, 8)
	r = signedPost(t, e, path, open, team["ada"], &other)
	require.Equal(t, http.StatusForbidden, r.Status, "signed a fee, asked none: %s", r.Body)
	r = signedPost(t, e, path, open, team["bob"], &x)
	require.Equal(t, http.StatusForbidden, r.Status, "an approver does not book transfers: %s", r.Body)
	require.Zero(t, transfers())

	h := operatortest.Header(t, team["ada"], x, time.Now())
	r = e.Do(apptest.Req{Method: "POST", Path: path, Body: open, Key: e.Admin, Header: h})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, 2, transfers())
	require.Equal(t, []string{"op:ada"}, auditActors(t, e, ledger.AuditTransfer))
	r = e.Do(apptest.Req{Method: "POST", Path: path, Body: open, Key: e.Admin, Header: h})
	require.Equal(t, http.StatusUnauthorized, r.Status, "replayed: %s", r.Body)
	r = signedPost(t, e, path, open, team["ada"], &x)
	require.Equal(t, http.StatusOK, r.Status, "signed again: the booking is a replay: %s", r.Body)
	var b ledger.BookingView
	r.JSON(t, &b)
	require.True(t, b.Replayed)
	require.Equal(t, 2, transfers())
	require.Equal(t, []string{"op:ada"}, auditActors(t, e, ledger.AuditTransfer), "a replay records nothing")
}
