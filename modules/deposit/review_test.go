package deposit_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/audit"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
)

type resolveBody struct {
	Action    string  `json:"action"`
	PaymentID *string `json:"payment_id,omitempty"`
}

type resolved struct {
	Deposit  deposit.View `json:"deposit"`
	Credited string       `json:"credited"`
}

func (e *env) reviewQueue(t *testing.T, query string) []deposit.View {
	t.Helper()
	return adminList[deposit.View](t, e, "/v1/admin/deposits/review"+query, "deposits")
}

// resolveOK posts a resolution with the admin key, requires a 200 and
// returns what it answered.
func (e *env) resolveOK(t *testing.T, id string, body resolveBody) resolved {
	t.Helper()
	r := e.resolve(t, id, body)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var res resolved
	r.JSON(t, &res)
	return res
}

// latePayment makes a BTC deposit that expired and then received a
// payment (confirmed at the processor): it is in review.
func (e *env) latePayment(t *testing.T, user string) (deposit.View, btcpaysim.PaymentInfo) {
	t.Helper()
	v := e.create(t, user, "BTC", units("50000"))
	e.advance(61 * time.Minute)
	e.reconcileTo(t, v.DepositID, deposit.StatusExpired)
	paid := e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0005"}, Settled: true})
	require.True(t, paid[0].AfterExpiration)
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	return v, paid[0]
}

// expired -> review for a payment after expiry; review -> settled by an
// operator's credit of what the processor says it was worth, with the
// admin key as resolved_by; a second resolution is an illegal transition.
func TestLatePaymentIsReviewedAndCredited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v, paid := e.latePayment(t, "walt")
	require.Len(t, v.Payments, 1)
	p := v.Payments[0]
	require.True(t, p.AfterExpiration)
	require.False(t, p.Credited, "money in review is visible, not in the balance")
	require.Nil(t, p.ResolvedBy)
	require.Equal(t, "0.00000000", v.AmountCredited)
	ev := e.reviewEvent(t, v.DepositID)
	require.Equal(t, paid.ID, ev["payment_id"])
	require.Equal(t, "0.00050000", ev["amount"])
	require.Contains(t, ev["review_reason"], "after the invoice expired")
	require.Equal(t, []string{v.DepositID}, ids(e.reviewQueue(t, "")))
	for range 2 { // reconciling again changes nothing
		e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	}
	require.Len(t, e.events(t, "deposit.review_required", v.DepositID), 1)
	require.Zero(t, e.ledgerEntries(t, v.DepositID))

	res := e.resolveOK(t, v.DepositID, resolveBody{Action: "credit"})
	require.Equal(t, "0.00050000", res.Credited)
	require.Equal(t, deposit.StatusSettled, res.Deposit.Status)
	require.Equal(t, "0.00050000", res.Deposit.AmountCredited)
	require.True(t, res.Deposit.Payments[0].Credited)
	require.Equal(t, e.AdminKeyID, *res.Deposit.Payments[0].ResolvedBy)
	require.Equal(t, res.Deposit, e.deposit(t, v.DepositID))
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	settled := e.events(t, "deposit.settled", v.DepositID)
	require.Len(t, settled, 1)
	require.Equal(t, "0.00050000", settled[0]["amount_credited"])
	require.Empty(t, e.reviewQueue(t, ""))

	again := e.resolve(t, v.DepositID, resolveBody{Action: "dismiss"})
	require.Equal(t, http.StatusConflict, again.Status, string(again.Body))
	require.Empty(t, again.Header.Get("Retry-After"), "an illegal transition, not an in-flight duplicate")
}

// review -> dismissed: nothing is credited, and the decision is recorded.
func TestLatePaymentDismissed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v, _ := e.latePayment(t, "xena")
	res := e.resolveOK(t, v.DepositID, resolveBody{Action: "dismiss"})
	require.Equal(t, "0.00000000", res.Credited)
	require.Equal(t, deposit.StatusDismissed, res.Deposit.Status)
	require.False(t, res.Deposit.Payments[0].Credited)
	require.Equal(t, e.AdminKeyID, *res.Deposit.Payments[0].ResolvedBy)
	require.Zero(t, e.ledgerEntries(t, v.DepositID))
	require.Equal(t, http.StatusConflict, e.resolve(t, v.DepositID, resolveBody{Action: "credit"}).Status)
	e.reconcileTo(t, v.DepositID, deposit.StatusDismissed, "dismissed is terminal")
}

// settled -> review: a later payment to a settled deposit's address; the
// first credit stands, the later payment waits for an operator.
func TestLaterPaymentToASettledDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "yuri", "BTC", units("100000"))
	inv := e.invoice(t, v.DepositID)
	e.pay(t, inv.ID, btcpaysim.PayParams{Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusSettled)

	later := e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0002"}, Settled: true})
	require.False(t, later[0].AfterExpiration)
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Equal(t, "0.00100000", v.AmountCredited, "the first credit is never reversed")
	ev := e.reviewEvent(t, v.DepositID)
	require.Contains(t, ev["review_reason"], "later payment")
	require.Equal(t, "0.00100000", ev["amount_credited"])

	res := e.resolveOK(t, v.DepositID, resolveBody{Action: "credit", PaymentID: &later[0].ID})
	require.Equal(t, "0.00020000", res.Credited)
	require.Equal(t, "0.00120000", res.Deposit.AmountCredited)
	require.Equal(t, deposit.StatusSettled, res.Deposit.Status)
	require.Equal(t, 2, e.ledgerEntries(t, v.DepositID))
}

// An invoice marked settled by hand with no payment at all: review; the
// operator's credit is what the processor says the invoice was worth.
func TestInvoiceMarkedSettledByHand(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "zoe", "BTC", units("70000"))
	require.NoError(t, e.Sim.MarkSettled(e.invoice(t, v.DepositID).ID))
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Empty(t, v.Payments)
	ev := e.reviewEvent(t, v.DepositID)
	require.Nil(t, ev["payment_id"])
	require.Contains(t, ev["review_reason"], "marked settled by hand")
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Len(t, e.events(t, "deposit.review_required", v.DepositID), 1)

	res := e.resolveOK(t, v.DepositID, resolveBody{Action: "credit"})
	require.Equal(t, "0.00070000", res.Credited)
	require.Equal(t, deposit.StatusSettled, res.Deposit.Status)
	require.Len(t, res.Deposit.Payments, 1, "the credit is recorded as a payment so amount_credited is their sum")
	require.True(t, res.Deposit.Payments[0].Credited)
	require.Equal(t, "0.00070000", res.Deposit.AmountCredited)
	e.reconcileTo(t, v.DepositID, deposit.StatusSettled, "the mark is not raised again")
}

// A top-up invoice marked settled with nothing paid is worth nothing: a
// credit is refused, a dismissal closes it.
func TestMarkedTopUpInvoiceHasNothingToCredit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "abe", "BTC", nil)
	require.NoError(t, e.Sim.MarkSettled(e.invoice(t, v.DepositID).ID))
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	r := e.resolve(t, v.DepositID, resolveBody{Action: "credit"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, http.StatusOK, e.resolve(t, v.DepositID, resolveBody{Action: "dismiss"}).Status)
}

// An amount the service refuses to round (a Lightning payment with
// millisatoshis) goes to review and cannot be credited as is.
func TestAmountNotInWholeUnitsGoesToReview(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "bea", "BTC_LN", nil)
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.00001000001"}})
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Equal(t, "0.00001000001", v.Payments[0].Amount, "shown as the processor reported it, never rounded")
	require.False(t, v.Payments[0].Credited)
	e.requireReviewReason(t, v.DepositID, "whole smallest units")

	r := e.resolve(t, v.DepositID, resolveBody{Action: "credit"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "never rounded")
	require.Zero(t, e.ledgerEntries(t, v.DepositID))
	require.Equal(t, http.StatusOK, e.resolve(t, v.DepositID, resolveBody{Action: "dismiss"}).Status)
}

// Concurrent resolutions of one review item: exactly one wins.
func TestConcurrentResolvesOneWins(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v, _ := e.latePayment(t, "cody")
	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.resolve(t, v.DepositID, resolveBody{Action: "credit"}).Status
		}()
	}
	wg.Wait()
	won := 0
	for _, s := range statuses {
		switch s {
		case http.StatusOK:
			won++
		case http.StatusConflict:
		default:
			t.Fatalf("unexpected status %d (%v)", s, statuses)
		}
	}
	require.Equal(t, 1, won, "%v", statuses)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	require.Equal(t, "0.00050000", e.deposit(t, v.DepositID).AmountCredited)
}

func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pending := e.create(t, "dan", "BTC", nil)
	require.Equal(t, http.StatusNotFound, e.resolve(t, uuid.NewString(), resolveBody{Action: "credit"}).Status)
	require.Equal(t, http.StatusNotFound, e.resolve(t, "not-a-uuid", resolveBody{Action: "credit"}).Status)
	require.Equal(t, http.StatusConflict, e.resolve(t, pending.DepositID, resolveBody{Action: "credit"}).Status, "pending is not review")
	require.Equal(t, http.StatusUnprocessableEntity, e.resolve(t, pending.DepositID, resolveBody{Action: "refund"}).Status)
	require.Equal(t, http.StatusUnprocessableEntity, e.resolve(t, pending.DepositID, map[string]any{}).Status)
	require.Equal(t, http.StatusConflict, e.resolve(t, pending.DepositID, map[string]any{"action": "credit", "amount": "1"}).Status,
		"there is no amount field: it is ignored")
	rw := e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/deposits/" + pending.DepositID + "/resolve", Body: resolveBody{Action: "credit"}})
	require.Equal(t, http.StatusForbidden, rw.Status, "a readwrite key is not an admin key")

	// Two uncredited payments: the operator must say which.
	v := e.create(t, "dan", "BTC", nil)
	e.advance(61 * time.Minute)
	paid := e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0001", "0.0002"}, Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Equal(t, http.StatusUnprocessableEntity, e.resolve(t, v.DepositID, resolveBody{Action: "credit"}).Status)
	unknown := "no-such-payment"
	require.Equal(t, http.StatusUnprocessableEntity, e.resolve(t, v.DepositID, resolveBody{Action: "credit", PaymentID: &unknown}).Status)
	nul := "pay\u0000ment"
	r0 := e.resolve(t, v.DepositID, map[string]any{"action": "credit", "payment_id": nul})
	require.Equal(t, http.StatusUnprocessableEntity, r0.Status, string(r0.Body))
	require.Contains(t, string(r0.Body), `"loc":["body","payment_id"]`, "a field error names it")

	// The processor down: 503, nothing credited; the same key completes.
	e.Sim.GoDown(btcpaysim.DownError)
	req := apptest.Req{Method: "POST", Path: "/v1/admin/deposits/" + v.DepositID + "/resolve", Key: e.Admin, Idem: "resolve-down",
		Body: resolveBody{Action: "credit", PaymentID: &paid[0].ID}}
	require.Equal(t, http.StatusServiceUnavailable, e.Do(req).Status)
	require.Zero(t, e.ledgerEntries(t, v.DepositID))
	e.Sim.Up()
	r := e.Do(req)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var res resolved
	r.JSON(t, &res)
	require.Equal(t, "0.00010000", res.Credited)
	require.Equal(t, deposit.StatusReview, res.Deposit.Status, "the other payment still waits")
	r = e.resolve(t, v.DepositID, resolveBody{Action: "credit"})
	require.Equal(t, http.StatusOK, r.Status, "now unambiguous: %s", r.Body)
	r.JSON(t, &res)
	require.Equal(t, "0.00020000", res.Credited)
	require.Equal(t, deposit.StatusSettled, res.Deposit.Status)
	require.Equal(t, "0.00030000", res.Deposit.AmountCredited)
	// A credited payment cannot be resolved again.
	require.Equal(t, http.StatusConflict, e.resolve(t, v.DepositID, resolveBody{Action: "credit", PaymentID: &paid[0].ID}).Status)
}

func TestReviewQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	first, _ := e.latePayment(t, "eve")
	e.advance(time.Minute)
	second, _ := e.latePayment(t, "fay")
	require.Equal(t, []string{first.DepositID, second.DepositID}, ids(e.reviewQueue(t, "")), "oldest first")
	require.Equal(t, []string{first.DepositID}, ids(e.reviewQueue(t, "?limit=1")))
	require.Len(t, e.reviewQueue(t, "?limit=200"), 2)
	for _, bad := range []string{"?limit=0", "?limit=201", "?limit=abc", "?limit=-1", "?limt=10", "?status=review"} {
		r := e.AdminGet("/v1/admin/deposits/review" + bad)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, bad)
	}
	for _, path := range []string{"/v1/admin/wallet-alerts?limt=5", "/v1/admin/events?stauts=dead", "/v1/admin/withdrawals?stauts=pending_approval"} {
		r := e.AdminGet(path)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "a misspelt filter is refused, not ignored: %s", path)
		require.Contains(t, string(r.Body), `"type":"extra_forbidden"`, path)
	}
	require.Equal(t, http.StatusForbidden, e.Get("/v1/admin/deposits/review").Status)
	require.NoError(t, e.Svc.Reconcile(context.Background(), uuid.MustParse(first.DepositID)))
}

func ids(vs []deposit.View) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.DepositID
	}
	return out
}

// Money confirming for a dismissed deposit is never credited automatically,
// even when nothing else about the payment needs an operator.
func TestPaymentToADismissedDepositIsNotCredited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "ned", "BTC", nil)
	inv := e.invoice(t, v.DepositID).ID
	require.NoError(t, e.Sim.MarkSettled(inv))
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Equal(t, http.StatusOK, e.resolve(t, v.DepositID, resolveBody{Action: "dismiss"}).Status)

	e.pay(t, inv, btcpaysim.PayParams{Amounts: []string{"0.0003"}, Settled: true})
	v = e.reconcileTo(t, v.DepositID, deposit.StatusDismissed)
	require.Equal(t, "0.00000000", v.AmountCredited)
	require.Len(t, e.alerts(t, deposit.AlertPaymentAfterDismiss), 1)
	require.Contains(t, e.alerts(t, deposit.AlertPaymentAfterDismiss)[0], v.DepositID+":")
	e.requireBooks(t)

	// An operator credits it, through the ledger, once; the deposit stays
	// dismissed and the audit trail keeps why.
	ctx := context.Background()
	id := uuid.MustParse(v.DepositID)
	pid := v.Payments[0].PaymentID
	op := audit.CLI("ops")
	credit := func(pid, reason string) (deposit.Payment, error) {
		return e.Svc.CreditAfterDismissal(ctx, deposit.CreditParams{DepositID: id, PaymentID: pid, Reason: reason, Actor: op})
	}
	_, err := credit(pid, "short")
	require.Error(t, err)
	_, err = credit("no-such-payment", "the payer asked us to keep it")
	require.Error(t, err)
	p, err := credit(pid, "the payer confirmed the late payment is a top-up")
	require.NoError(t, err)
	require.True(t, p.Credited)
	_, err = credit(pid, "the payer confirmed the late payment is a top-up")
	require.ErrorContains(t, err, "credited already")
	v = e.deposit(t, v.DepositID)
	require.Equal(t, deposit.StatusDismissed, v.Status)
	require.Equal(t, "0.00030000", v.AmountCredited)
	n, err := e.App.DB.Bun.NewSelect().Table("audit_log").Where("action = ? AND target = ?", audit.DepositCreditDismissed, v.DepositID).Count(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
