package deposit_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/audit"
	"svc/modules/deposit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/fault"
)

// team enrolls ada (admin), bob (approver) and val (viewer) on e's clock.
func (e *env) team(t *testing.T) map[string]*operator.Signer {
	t.Helper()
	return operatortest.Team(t, e.App.DB.Bun, e.Clock.Now, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver}, operatortest.Member{Name: "val", Role: operator.Viewer})
}

// signedResolve posts a resolution with the admin key and h's headers.
func (e *env) signedResolve(t *testing.T, id string, body resolveBody, h map[string]string) *apptest.Response {
	t.Helper()
	return e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/deposits/" + id + "/resolve", Body: body, Key: e.Admin, Header: h})
}

// header signs x at e's time with s.
func (e *env) header(t *testing.T, s *operator.Signer, x operator.Expect) map[string]string {
	t.Helper()
	return operatortest.Header(t, s, x, e.Clock.Now())
}

// auditActors lists the actors of the audit trail's entries of action,
// newest first, through GET /v1/admin/audit.
func (e *env) auditActors(t *testing.T, action string) []string {
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

// TestResolveSigned: POST /v1/admin/deposits/{id}/resolve with an
// approver's signature of the deposit, the action, the asset, the user and
// what the processor says the credit is worth resolves it, with op:NAME as
// the payment's resolved_by and in the audit trail; a statement of another
// amount or action is 403, a viewer's 403, and nothing is credited; the
// same statement on the deposit in review again (a later payment of the
// same amount) is 401; with OPERATOR_SIGNATURES=required an unsigned
// resolution is 401.
func TestResolveSigned(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	team := e.team(t)
	v := e.create(t, "yuri", "BTC", units("100000"))
	inv := e.invoice(t, v.DepositID)
	e.pay(t, inv.ID, btcpaysim.PayParams{Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
	e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0002"}, Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)

	pv, err := e.Svc.Preview(ctx, deposit.ResolveParams{DepositID: uuid.MustParse(v.DepositID), Action: deposit.ActionCredit})
	require.NoError(t, err)
	require.Equal(t, int64(20_000), pv.Credit, "what the processor says the later payment was worth")
	x := deposit.ResolveExpect(pv.Deposit, pv.Asset, deposit.ActionCredit, nil, pv.Credit)
	require.Equal(t, operator.Expect{Action: audit.DepositResolve, Resource: v.DepositID, Role: operator.Approver, Facts: map[string]string{
		"action": "credit", "asset": "BTC", "external_user_id": "yuri", "amount": "0.00020000"}}, x)

	more := deposit.ResolveExpect(pv.Deposit, pv.Asset, deposit.ActionCredit, nil, 30_000)
	r := e.signedResolve(t, v.DepositID, resolveBody{Action: "credit"}, e.header(t, team["bob"], more))
	require.Equal(t, http.StatusForbidden, r.Status, "signed 0.0003, the processor says 0.0002: %s", r.Body)
	require.Contains(t, r.Map(t)["detail"], "amount")
	dismiss := deposit.ResolveExpect(pv.Deposit, pv.Asset, deposit.ActionDismiss, nil, 0)
	r = e.signedResolve(t, v.DepositID, resolveBody{Action: "credit"}, e.header(t, team["bob"], dismiss))
	require.Equal(t, http.StatusForbidden, r.Status, "signed a dismissal: %s", r.Body)
	r = e.signedResolve(t, v.DepositID, resolveBody{Action: "credit"}, e.header(t, team["val"], x))
	require.Equal(t, http.StatusForbidden, r.Status, "a viewer does not resolve: %s", r.Body)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	require.Equal(t, deposit.StatusReview, e.deposit(t, v.DepositID).Status)

	signed := e.header(t, team["bob"], x)
	r = e.signedResolve(t, v.DepositID, resolveBody{Action: "credit"}, signed)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var res resolved
	r.JSON(t, &res)
	require.Equal(t, "0.00020000", res.Credited)
	require.Equal(t, "op:bob", *res.Deposit.Payments[1].ResolvedBy)
	require.Equal(t, []string{"op:bob"}, e.auditActors(t, audit.DepositResolve))

	// Another later payment of the same amount: the deposit is in review
	// with the same facts; the statement was accepted once.
	e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0002"}, Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	r = e.signedResolve(t, v.DepositID, resolveBody{Action: "credit"}, signed)
	require.Equal(t, http.StatusUnauthorized, r.Status, "replayed: %s", r.Body)
	require.Equal(t, 2, e.ledgerEntries(t, v.DepositID))
	r = e.signedResolve(t, v.DepositID, resolveBody{Action: "credit"}, e.header(t, team["bob"], x))
	require.Equal(t, http.StatusOK, r.Status, "signed again: %s", r.Body)
	require.Equal(t, "0.00140000", e.deposit(t, v.DepositID).AmountCredited)

	req := setup(t, withConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	admins := req.team(t)
	late, _ := req.latePayment(t, "walt")
	r = req.signedResolve(t, late.DepositID, resolveBody{Action: "dismiss"}, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status, "unsigned: %s", r.Body)
	pv, err = req.Svc.Preview(ctx, deposit.ResolveParams{DepositID: uuid.MustParse(late.DepositID), Action: deposit.ActionDismiss})
	require.NoError(t, err)
	r = req.signedResolve(t, late.DepositID, resolveBody{Action: "dismiss"},
		req.header(t, admins["ada"], deposit.ResolveExpect(pv.Deposit, pv.Asset, deposit.ActionDismiss, nil, pv.Credit)))
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &res)
	require.Equal(t, deposit.StatusDismissed, res.Deposit.Status)
	require.Equal(t, "op:ada", *res.Deposit.Payments[0].ResolvedBy)
}

// TestCreditAfterDismissalSigned: an approver's signature of the deposit,
// the payment, its amount, the asset, the user and the reason credits a
// payment that confirmed after its deposit was dismissed, with op:NAME as
// its resolved_by and in the audit trail; a statement of another reason is
// 403, a viewer's 403; the statement again is refused (the payment is
// credited); with OPERATOR_SIGNATURES=required an unsigned credit is 401.
func TestCreditAfterDismissalSigned(t *testing.T) {
	t.Parallel()
	e := setup(t, withConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	ctx := context.Background()
	team := e.team(t)
	v := e.create(t, "ned", "BTC", nil)
	inv := e.invoice(t, v.DepositID).ID
	require.NoError(t, e.Sim.MarkSettled(inv))
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	id := uuid.MustParse(v.DepositID)
	pv, err := e.Svc.Preview(ctx, deposit.ResolveParams{DepositID: id, Action: deposit.ActionDismiss})
	require.NoError(t, err)
	r := e.signedResolve(t, v.DepositID, resolveBody{Action: "dismiss"},
		e.header(t, team["bob"], deposit.ResolveExpect(pv.Deposit, pv.Asset, deposit.ActionDismiss, nil, 0)))
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	e.pay(t, inv, btcpaysim.PayParams{Amounts: []string{"0.0003"}, Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusDismissed)

	d, rows, err := e.Svc.Snapshot(ctx, id)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	btc, err := e.App.Assets.Get(ctx, "BTC")
	require.NoError(t, err)
	const reason = "the payer confirmed the late payment is a top-up"
	x := deposit.CreditAfterDismissalExpect(d, btc, rows[0], reason)
	require.Equal(t, operator.Expect{Action: audit.DepositCreditDismissed, Resource: v.DepositID, Role: operator.Approver, Facts: map[string]string{
		"asset": "BTC", "external_user_id": "ned", "payment_id": rows[0].PaymentID, "amount": "0.00030000", "reason": reason}}, x)
	sign := func(s *operator.Signer, x operator.Expect) *operator.Envelope {
		env := operatortest.Sign(t, s, operator.NewStatement(x.Action, x.Resource, x.Facts, e.Clock.Now()))
		return &env
	}
	p := deposit.CreditParams{DepositID: id, PaymentID: rows[0].PaymentID, Reason: reason, Actor: audit.CLI("ops")}
	_, err = e.Svc.CreditAfterDismissal(ctx, p)
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "unsigned: %v", err)
	p.Signature = sign(team["bob"], deposit.CreditAfterDismissalExpect(d, btc, rows[0], "another reason, signed by mistake"))
	_, err = e.Svc.CreditAfterDismissal(ctx, p)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "another reason: %v", err)
	p.Signature = sign(team["val"], x)
	_, err = e.Svc.CreditAfterDismissal(ctx, p)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "a viewer: %v", err)
	require.Equal(t, "0.00000000", e.deposit(t, v.DepositID).AmountCredited)

	p.Signature = sign(team["bob"], x)
	pay, err := e.Svc.CreditAfterDismissal(ctx, p)
	require.NoError(t, err)
	require.True(t, pay.Credited)
	require.Equal(t, "op:bob", *pay.ResolvedBy)
	require.Equal(t, []string{"op:bob"}, e.auditActors(t, audit.DepositCreditDismissed))
	_, err = e.Svc.CreditAfterDismissal(ctx, p)
	require.ErrorContains(t, err, "credited already")
	require.Equal(t, "0.00030000", e.deposit(t, v.DepositID).AmountCredited)
}
