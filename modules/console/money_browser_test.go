package console_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/audit"
	"svc/modules/deposit"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/withdrawal"
	"svc/platform/browsertest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/clock"
	"svc/platform/config"
)

// moneyEnv is the whole service (apptest: the API on its own listener,
// the simulated payment processor) with its console, as svc admin console
// builds it (App.Console), on the same database and clock. ada and bea are
// approvers with a passkey each; OPERATOR_SIGNATURES is required, so only
// a signed decision acts.
type moneyEnv struct {
	*apptest.Env
	Console string // http://localhost:PORT
	Sim     *btcpaysim.Sim
	Clock   *clock.Fake
	Keys    map[string]*operatortest.Passkey
}

func newMoneyEnv(t *testing.T) *moneyEnv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	e := &moneyEnv{Console: "http://localhost:" + port, Keys: map[string]*operatortest.Passkey{}}
	sim, clk := apptest.StartProcessor(t, btcpaysim.Options{})
	e.Sim, e.Clock = sim, clk
	e.Env = apptest.New(t, apptest.WithClock(clk), apptest.WithProcessor(sim, "test-processor-webhook-secret"),
		apptest.WithConfig(func(c *config.Config) {
			c.Operators.WebAuthnOrigins = []string{e.Console}
			c.Operators.Signatures = "required"
		}))
	ctx := context.Background()
	root := operatortest.Team(t, e.App.DB.Bun, clk.Now, operatortest.Member{Name: "root", Role: operator.Admin})["root"]
	for _, name := range []string{"ada", "bea"} {
		e.Keys[name] = operatortest.NewPasskey("localhost")
		head, err := e.App.Operators.Head(ctx, e.App.DB.Bun)
		require.NoError(t, err)
		c := operator.Change{Action: operator.ActionEnroll, Name: name, Role: operator.Approver, PublicKey: e.Keys[name].Public().String()}
		_, err = e.App.Operators.Submit(ctx, operatortest.Sign(t, root, c.Statement(head, clk.Now())))
		require.NoError(t, err)
	}
	srv, err := e.App.Console()
	require.NoError(t, err)
	serve(t, ln, srv.Handler())
	return e
}

// serve serves h on ln until the test ends.
func serve(t *testing.T, ln net.Listener, h http.Handler) {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("console server: %v", err)
		}
	}()
	t.Cleanup(func() { _ = hs.Close() })
}

// operator opens a tab of its own browser context whose authenticator
// holds name's passkey, and signs name in.
func (e *moneyEnv) operator(t *testing.T, name string) *browsertest.Page {
	t.Helper()
	p := browsertest.New(t)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	p.AddAuthenticator(browsertest.Passkey{RPID: "localhost", CredentialID: id, PKCS8: e.Keys[name].PKCS8(), UserHandle: []byte(name)})
	p.Do(chromedp.Navigate(e.Console+"/"),
		chromedp.WaitVisible(chromedp.ID("sign-in")),
		chromedp.SendKeys(chromedp.ID("name"), name),
		chromedp.Click(chromedp.CSS("#sign-in button[type=submit]")),
		chromedp.WaitVisible(chromedp.ID("who")))
	return p
}

// withdrawal creates a withdrawal of units of BTC from user through the
// API (funded first, as a settled deposit would), and requires its status.
func (e *moneyEnv) withdrawal(t *testing.T, user string, units int64, want withdrawal.Status) withdrawal.View {
	t.Helper()
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, "BTC", ledger.UserHolder(user), units,
		fmt.Sprintf("test-funding:%s:%d:%d", user, units, time.Now().UnixNano()), "test funding")
	require.NoError(t, err)
	r := e.Post("/v1/withdrawals", map[string]string{"external_user_id": user, "asset": "BTC", "amount": fmt.Sprint(units),
		"destination_address": chaintest.P2WPKH(t, chain.Regtest, user+fmt.Sprint(units))})
	v := answer[withdrawal.View](t, r, http.StatusCreated)
	require.Equal(t, want, v.Status)
	return v
}

// answer requires r's status and decodes its body.
func answer[T any](t *testing.T, r *apptest.Response, status int) T {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Body))
	var v T
	r.JSON(t, &v)
	return v
}

// read is the withdrawal as the platform reads it: GET /v1/withdrawals/{id}
// with the platform's key.
func (e *moneyEnv) read(t *testing.T, id string) withdrawal.View {
	t.Helper()
	return answer[withdrawal.View](t, e.Get("/v1/withdrawals/"+id), http.StatusOK)
}

// adminRead is GET /v1/admin/withdrawals/{id}, with the approvals.
func (e *moneyEnv) adminRead(t *testing.T, id string) withdrawal.AdminView {
	t.Helper()
	return answer[withdrawal.AdminView](t, e.AdminGet("/v1/admin/withdrawals/"+id), http.StatusOK)
}

// confirmAndSign follows the link sel to its confirmation page, types
// text into field (if any) and signs; it returns the result or the
// refusal.
func confirmAndSign(t *testing.T, p *browsertest.Page, sel, field, text string) string {
	t.Helper()
	p.Do(chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.ID("signed-action")))
	if field != "" {
		p.Do(chromedp.SendKeys(chromedp.ID(field), text))
	}
	return sign(t, p)
}

// sign submits the confirmation page's form and returns the result page's
// text or the refusal shown on the page.
func sign(t *testing.T, p *browsertest.Page) string {
	t.Helper()
	// The page's script listens once the document is loaded: a click
	// before would post the form without it.
	_, err := chromedp.Run(p.Ctx, chromedp.Poll[bool](`document.readyState === "complete"`))
	require.NoError(t, err)
	p.Do(chromedp.Click(chromedp.CSS("#signed-action button[type=submit]")))
	return p.Text(`#result, #action-error:not([hidden])`)
}

// TestFourEyesWithdrawalInTwoBrowsers: above BTC's four-eyes threshold,
// ada approves in her browser (the page then shows her as the approver so
// far), her second approval is refused in plain words and does not count,
// and bea's approval in her own browser approves it: the API reads it
// approved by both, each signature verified. The confirmation shows the
// amount in display units and the destination.
func TestFourEyesWithdrawalInTwoBrowsers(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "UPDATE assets SET withdrawal_four_eyes_threshold = 3000000 WHERE asset = 'BTC'")
	require.NoError(t, err)
	w := e.withdrawal(t, "yuri", 5_000_000, withdrawal.StatusPendingApproval)

	ada := e.operator(t, "ada")
	ada.Do(chromedp.Navigate(e.Console + "/withdrawals"))
	row := ada.Text("#pending #w-" + w.WithdrawalID)
	require.Contains(t, row, "0.05000000")
	require.Contains(t, row, w.DestinationAddress)
	require.Contains(t, row, "yuri")
	require.Contains(t, row, "withdrawal_auto_limit", "the approval reason")
	sel := fmt.Sprintf(`#w-%s a[href$="/approve"]`, w.WithdrawalID)
	ada.Do(chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "0.05000000 BTC", ada.Text("#confirm-amount"))
	require.Equal(t, w.DestinationAddress, ada.Text("#confirm-destination"))
	require.Contains(t, sign(t, ada), "approval by op:ada is recorded; 1 more approval by a different operator is needed")
	require.Equal(t, withdrawal.StatusPendingApproval, e.read(t, w.WithdrawalID).Status)

	ada.Do(chromedp.Navigate(e.Console + "/withdrawals"))
	require.Contains(t, ada.Text("#w-"+w.WithdrawalID), "op:ada", "who approved so far")
	refused := confirmAndSign(t, ada, sel, "", "")
	require.Contains(t, refused, "Refused, nothing was done")
	require.Contains(t, refused, "this operator already approved the withdrawal; four-eyes approval needs a different operator")
	v := e.adminRead(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusPendingApproval, v.Status)
	require.Len(t, v.Approvals, 1, "the second approval by ada does not count")

	bea := e.operator(t, "bea")
	bea.Do(chromedp.Navigate(e.Console + "/withdrawals"))
	require.Contains(t, confirmAndSign(t, bea, sel, "note", "checked the destination"), "is approved (approved by op:ada, op:bea)")
	require.Equal(t, withdrawal.StatusApproved, e.read(t, w.WithdrawalID).Status)
	v = e.adminRead(t, w.WithdrawalID)
	require.Equal(t, "op:ada, op:bea", *v.ApprovedBy)
	require.Len(t, v.Approvals, 2)
	for _, ap := range v.Approvals {
		require.True(t, ap.SignatureVerified, "%+v", ap)
	}
	require.Equal(t, "checked the destination", *v.Approvals[1].Note)
	onlyRefusals(t, ada, 409)
	require.Empty(t, bea.Errors(), "console errors")
}

// TestRejectAndReleaseWithdrawals: ada rejects a withdrawal pending
// approval and releases a failed one and one stuck in submission (the
// attestation typed in, too short first: refused by the service's rule);
// the API reads each refunded, with the reason or the attestation and
// op:ada. A withdrawal still being submitted is refused release in the
// service's words.
func TestRejectAndReleaseWithdrawals(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	ctx := context.Background()
	pending := e.withdrawal(t, "yuri", 2_000_000, withdrawal.StatusPendingApproval)
	failed := e.withdrawal(t, "zoe", 3_000_000, withdrawal.StatusPendingApproval)
	stuck := e.withdrawal(t, "zoe", 4_000_000, withdrawal.StatusPendingApproval)
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET status = 'failed', failure_reason = 'the payment processor refused the payout' WHERE id = ?", failed.WithdrawalID)
	require.NoError(t, err)
	// Stuck: still submitting after five attempts, its claim lapsed; the
	// processor has no payout of it.
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET status = 'submitting', submit_attempts = 5, next_attempt_at = ? WHERE id = ?",
		e.App.Clock.Now().Add(-time.Minute), stuck.WithdrawalID)
	require.NoError(t, err)
	// Four attempts is not stuck yet.
	retrying := e.withdrawal(t, "zoe", 5_000_000, withdrawal.StatusPendingApproval)
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET status = 'submitting', submit_attempts = 4, next_attempt_at = ? WHERE id = ?",
		e.App.Clock.Now().Add(time.Minute), retrying.WithdrawalID)
	require.NoError(t, err)

	ada := e.operator(t, "ada")
	ada.Do(chromedp.Navigate(e.Console + "/withdrawals"))
	require.Contains(t, ada.Text("#failed #w-"+failed.WithdrawalID), "the payment processor refused the payout")
	require.Contains(t, ada.Text("#stuck #w-"+stuck.WithdrawalID), "0.04000000")
	require.Contains(t, ada.Text("#stuck h2"), "Stuck in submission: 1")
	listed, err := chromedp.Run(ada.Ctx, chromedp.Evaluate[bool](`document.getElementById("w-`+retrying.WithdrawalID+`") !== null`))
	require.NoError(t, err)
	require.False(t, listed, "a withdrawal retried 4 times is not stuck")

	res := confirmAndSign(t, ada, fmt.Sprintf(`#w-%s a[href$="/reject"]`, pending.WithdrawalID), "reason", "unknown destination")
	require.Contains(t, res, "is refunded: 0.02000000 BTC returned to yuri")
	v := e.adminRead(t, pending.WithdrawalID)
	require.Equal(t, withdrawal.StatusRefunded, e.read(t, pending.WithdrawalID).Status)
	require.Equal(t, "op:ada", *v.RejectedBy)
	require.Equal(t, "rejected by an operator: unknown destination", *v.FailureReason)
	trail := answer[audit.ListView](t, e.AdminGet("/v1/admin/audit?action=withdrawal.reject"), http.StatusOK)
	require.Len(t, trail.Entries, 1)
	require.Equal(t, "op:ada", trail.Entries[0].Actor, "the signed statement's operator")

	ada.Do(chromedp.Navigate(e.Console + "/withdrawals"))
	sel := fmt.Sprintf(`#w-%s a[href$="/release"]`, failed.WithdrawalID)
	ada.Do(chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "0.03000000 BTC", ada.Text("#confirm-amount"))
	rule, err := chromedp.Run(ada.Ctx, chromedp.Evaluate[string](`(a => a.required + " " + a.minLength + " " + a.maxLength)(document.getElementById("attestation"))`))
	require.NoError(t, err)
	require.Equal(t, "true 10 2000", rule, "the attestation's rule is the service's")
	// The page's length rule is the service's: a short one typed past the
	// browser's check is refused by the console before signing.
	ada.Do(chromedp.Evaluate[chromedp.Void](`document.getElementById("attestation").removeAttribute("minlength")`),
		chromedp.SendKeys(chromedp.ID("attestation"), "short"))
	require.Contains(t, sign(t, ada), "The attestation must have 10 to 2000 characters")
	ada.Do(chromedp.SendKeys(chromedp.ID("attestation"), ": the processor shows no payout"))
	require.Contains(t, sign(t, ada), "is refunded: 0.03000000 BTC returned to zoe (released by op:ada)")
	v = e.adminRead(t, failed.WithdrawalID)
	require.Equal(t, withdrawal.StatusRefunded, e.read(t, failed.WithdrawalID).Status)
	require.Equal(t, "op:ada", *v.ReleasedBy)
	require.Equal(t, "short: the processor shows no payout", *v.ReleaseAttestation)

	// Stuck, but a submitter's claim runs again: the service refuses.
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET next_attempt_at = ? WHERE id = ?", e.App.Clock.Now().Add(time.Minute), stuck.WithdrawalID)
	require.NoError(t, err)
	ada.Do(chromedp.Navigate(e.Console + "/withdrawals"))
	sel = fmt.Sprintf(`#w-%s a[href$="/release"]`, stuck.WithdrawalID)
	res = confirmAndSign(t, ada, sel, "attestation", "the processor shows no payout of it")
	require.Contains(t, res, "Refused, nothing was done: cannot release withdrawal "+stuck.WithdrawalID+" yet: it is being handed to the processor")
	require.Equal(t, withdrawal.StatusSubmitting, e.read(t, stuck.WithdrawalID).Status)
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET next_attempt_at = ? WHERE id = ?", e.App.Clock.Now().Add(-time.Minute), stuck.WithdrawalID)
	require.NoError(t, err)
	require.Contains(t, sign(t, ada), "is refunded: 0.04000000 BTC returned to zoe")
	require.Equal(t, withdrawal.StatusRefunded, e.read(t, stuck.WithdrawalID).Status)
	onlyRefusals(t, ada, 422, 409)
}

// TestMoneyActionWithoutCSRFTokenIsRefused: an approval posted without
// the session's CSRF token is refused before anything is signed or done.
func TestMoneyActionWithoutCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	w := e.withdrawal(t, "yuri", 2_000_000, withdrawal.StatusPendingApproval)
	ada := e.operator(t, "ada")
	ada.Do(chromedp.Navigate(e.Console+"/withdrawals/"+w.WithdrawalID+"/approve"), chromedp.WaitVisible(chromedp.ID("signed-action")),
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#signed-action input[name=csrf]").remove()`))
	require.Contains(t, sign(t, ada), "security token is missing or wrong, so nothing was done")
	require.Equal(t, withdrawal.StatusPendingApproval, e.read(t, w.WithdrawalID).Status)
	require.Empty(t, e.adminRead(t, w.WithdrawalID).Approvals)
	onlyRefusals(t, ada, 403)
}

// TestSignedActionIsAnsweredOnce: the statement of a money action takes
// one answer, right or wrong, within 2 minutes: after another passkey's
// signature (refused by the service), the right one is refused too; a
// right answer acts once, and the same answer again is refused; a
// statement older than 2 minutes is refused. (A browser without its
// browser: the console's own requests, answered as a passkey would.)
func TestSignedActionIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	w := e.withdrawal(t, "yuri", 2_000_000, withdrawal.StatusPendingApproval)
	c := (&env{URL: e.Console}).client(t)
	res, body := c.answer(c.assertion(e.Keys["ada"], c.challenge("ada")))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	path := "/withdrawals/" + w.WithdrawalID + "/approve"
	res, body = c.do("GET", path, "", nil)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	c.csrf = csrfRE.FindStringSubmatch(body)[1]
	challenge := func() string {
		res, body := c.do("POST", path+"/challenge", "application/x-www-form-urlencoded", strings.NewReader("note="))
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var a struct{ Challenge string }
		require.NoError(t, json.Unmarshal([]byte(body), &a))
		return a.Challenge
	}
	sign := func(assertion string) (int, string) {
		res, body := c.do("POST", path, "application/json", strings.NewReader(assertion))
		return res.StatusCode, body
	}

	ch := challenge()
	status, body := sign(c.assertion(e.Keys["bea"], ch))
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = sign(c.assertion(e.Keys["ada"], ch))
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, "no statement to sign, or it was used or has expired")

	ch = challenge()
	e.Clock.Advance(2 * time.Minute)
	status, body = sign(c.assertion(e.Keys["ada"], ch))
	require.Equal(t, http.StatusConflict, status, body)
	require.Equal(t, withdrawal.StatusPendingApproval, e.read(t, w.WithdrawalID).Status)

	good := c.assertion(e.Keys["ada"], challenge())
	status, body = sign(good)
	require.Equal(t, http.StatusOK, status, body)
	status, body = sign(good)
	require.Equal(t, http.StatusConflict, status, body)
	v := e.adminRead(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusApproved, v.Status)
	require.Len(t, v.Approvals, 1)
}

// onlyRefusals requires that the page's console errors are the refusals
// the test expects (the browser logs an answer with an error status), and
// no other.
func onlyRefusals(t *testing.T, p *browsertest.Page, statuses ...int) {
	t.Helper()
	for _, m := range p.Errors() {
		ok := false
		for _, st := range statuses {
			ok = ok || strings.Contains(m, fmt.Sprintf("the server responded with a status of %d", st))
		}
		require.True(t, ok, "console error: %s", m)
	}
}

// inReview makes a deposit of user's in review, as the deposit tests do: a
// second payment after its invoice settled (0.001 BTC credited, 0.0002 BTC
// in review); it returns the deposit's id.
func (e *moneyEnv) inReview(t *testing.T, user string) string {
	t.Helper()
	ctx := context.Background()
	d := answer[deposit.View](t, e.Post("/v1/deposits", map[string]any{"external_user_id": user, "asset": "BTC", "expected_amount": "100000"}), http.StatusCreated)
	inv, ok := e.Sim.InvoiceByOrderID(d.DepositID)
	require.True(t, ok)
	_, err := e.Sim.Pay(inv.ID, btcpaysim.PayParams{Settled: true})
	require.NoError(t, err)
	require.NoError(t, e.App.Deposits.Reconcile(ctx, uuid.MustParse(d.DepositID)))
	_, err = e.Sim.Pay(inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0002"}, Settled: true})
	require.NoError(t, err)
	require.NoError(t, e.App.Deposits.Reconcile(ctx, uuid.MustParse(d.DepositID)))
	return d.DepositID
}

// TestResolveReviewQueue: two deposits in review (a second payment after
// settlement); ada credits one, the confirmation showing what the
// processor says it was worth in display units, and dismisses the other;
// the API reads the first credited and the second dismissed, each payment
// resolved by op:ada.
func TestResolveReviewQueue(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	ids := []string{e.inReview(t, "yuri"), e.inReview(t, "zoe")}
	ada := e.operator(t, "ada")
	ada.Do(chromedp.Navigate(e.Console + "/review"))
	row := ada.Text("#d-" + ids[0])
	require.Contains(t, row, "yuri")
	require.Contains(t, row, "0.00100000", "credited so far")

	ada.Do(chromedp.Click(chromedp.CSS(`#d-`+ids[0]+` a[href$="/credit"]`)), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "0.00020000 BTC", ada.Text("#confirm-amount"))
	require.Contains(t, sign(t, ada), "is settled: this resolution credited 0.00020000 BTC, 0.00120000 in total")
	ada.Do(chromedp.Navigate(e.Console + "/review"))
	require.Contains(t, confirmAndSign(t, ada, `#d-`+ids[1]+` a[href$="/dismiss"]`, "", ""), "credited 0.00000000 BTC")

	for i, want := range []deposit.Status{deposit.StatusSettled, deposit.StatusDismissed} {
		d := answer[deposit.View](t, e.Get("/v1/deposits/"+ids[i]), http.StatusOK)
		require.Equal(t, want, d.Status)
		resolved := false
		for _, p := range d.Payments {
			resolved = resolved || (p.ResolvedBy != nil && *p.ResolvedBy == "op:ada")
		}
		require.True(t, resolved, "%+v", d.Payments)
	}
	ada.Do(chromedp.Navigate(e.Console + "/review"))
	require.Contains(t, ada.Text("#review"), "The review queue is empty.")
	require.Empty(t, ada.Errors(), "console errors")
}

// TestCreditOneOfSeveralPayments: a deposit with two uncredited payments
// in review offers a credit per payment; the one chosen is the one the
// confirmation values and the resolution credits (the statement names
// it), and the API reads it credited by op:ada, the other not.
func TestCreditOneOfSeveralPayments(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	id := e.inReview(t, "yuri")
	inv, ok := e.Sim.InvoiceByOrderID(id)
	require.True(t, ok)
	paid, err := e.Sim.Pay(inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0003"}, Settled: true})
	require.NoError(t, err)
	require.NoError(t, e.App.Deposits.Reconcile(context.Background(), uuid.MustParse(id)))
	third := paid[0].ID

	ada := e.operator(t, "ada")
	ada.Do(chromedp.Navigate(e.Console + "/review"))
	res := confirmAndSign(t, ada, `#d-`+id+` a[href$="payment_id=`+third+`"]`, "", "")
	require.Contains(t, res, "this resolution credited 0.00030000 BTC")
	d := answer[deposit.View](t, e.Get("/v1/deposits/"+id), http.StatusOK)
	seen := 0
	for _, p := range d.Payments {
		switch {
		case p.PaymentID == third:
			require.True(t, p.Credited)
			require.Equal(t, "op:ada", *p.ResolvedBy)
			seen++
		case p.Amount == "0.00020000":
			require.False(t, p.Credited, "the other payment waits")
			seen++
		}
	}
	require.Equal(t, 2, seen, "%+v", d.Payments)
	onlyRefusals(t, ada)
}

// TestCreditChangedSinceConfirmation: ada's confirmation shows a credit of
// 0.0002 BTC; before she signs, bea credits that payment and a payment of
// 0.0005 BTC puts the deposit back in review: ada's signing is refused
// (what would be signed is not what she saw) and nothing more is credited.
// The confirmation read again shows the new payment, and signing it
// credits it.
func TestCreditChangedSinceConfirmation(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	id := e.inReview(t, "yuri")
	credit := e.Console + "/deposits/" + id + "/credit"
	ada, bea := e.operator(t, "ada"), e.operator(t, "bea")
	ada.Do(chromedp.Navigate(credit), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "0.00020000 BTC", ada.Text("#confirm-amount"))

	bea.Do(chromedp.Navigate(credit), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Contains(t, sign(t, bea), "this resolution credited 0.00020000 BTC")
	inv, ok := e.Sim.InvoiceByOrderID(id)
	require.True(t, ok)
	_, err := e.Sim.Pay(inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0005"}, Settled: true})
	require.NoError(t, err)
	require.NoError(t, e.App.Deposits.Reconcile(context.Background(), uuid.MustParse(id)))
	d := answer[deposit.View](t, e.Get("/v1/deposits/"+id), http.StatusOK)
	require.Equal(t, deposit.StatusReview, d.Status)

	require.Contains(t, sign(t, ada), "This changed since you looked at it; review it again.")
	d = answer[deposit.View](t, e.Get("/v1/deposits/"+id), http.StatusOK)
	require.Equal(t, deposit.StatusReview, d.Status)
	require.Equal(t, "0.00120000", d.AmountCredited, "nothing more credited")
	onlyRefusals(t, ada, http.StatusConflict)

	ada.Do(chromedp.Navigate(credit), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "0.00050000 BTC", ada.Text("#confirm-amount"))
	require.Contains(t, sign(t, ada), "this resolution credited 0.00050000 BTC, 0.00170000 in total")
}

// TestMoneyPagesFitNarrowAndWideScreens: at 1280×800 and at 390×844 no
// page of the money work scrolls sideways (long addresses and tables
// wrap or scroll inside their card); every control has a label, and every
// link and button is in the keyboard's tab order.
func TestMoneyPagesFitNarrowAndWideScreens(t *testing.T) {
	t.Parallel()
	e := newMoneyEnv(t)
	w := e.withdrawal(t, "a-user-with-a-rather-long-external-identifier", 2_000_000, withdrawal.StatusPendingApproval)
	d := e.inReview(t, "yuri")
	ada := e.operator(t, "ada")
	pages := []string{"/withdrawals", "/withdrawals/" + w.WithdrawalID + "/approve", "/withdrawals/" + w.WithdrawalID + "/reject",
		"/review", "/deposits/" + d + "/credit", "/deposits/" + d + "/dismiss"}
	for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
		for _, path := range pages {
			ada.Do(chromedp.EmulateViewport(size[0], size[1]), chromedp.Navigate(e.Console+path), chromedp.WaitVisible(chromedp.CSS("main")))
			fits, err := chromedp.Run(ada.Ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
			require.NoError(t, err)
			require.True(t, fits, "%s at %dx%d scrolls sideways", path, size[0], size[1])
			unlabeled, err := chromedp.Run(ada.Ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("input:not([type=hidden]), textarea, select"))
				.filter(el => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")).map(el => el.id || el.name)`))
			require.NoError(t, err)
			require.Empty(t, unlabeled, "%s: controls without a label", path)
			untabbable, err := chromedp.Run(ada.Ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("a[href], button, textarea"))
				.filter(el => el.tabIndex < 0 || el.disabled || !el.textContent.trim() && !el.getAttribute("aria-label") && el.tagName !== "TEXTAREA").map(el => el.outerHTML)`))
			require.NoError(t, err)
			require.Empty(t, untabbable, "%s: controls out of the tab order or without a name", path)
			hidden, err := chromedp.Run(ada.Ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("a, button"))
				.filter(el => el.getBoundingClientRect().right > window.innerWidth).map(el => el.textContent)`))
			require.NoError(t, err)
			require.Empty(t, hidden, "%s at %dx%d: controls beyond the right edge", path, size[0], size[1])
		}
	}
	// The keyboard alone approves: Enter on the approve link (in the tab
	// order, as checked above), then from the note Tab to the button and
	// Enter.
	ada.Do(chromedp.Navigate(e.Console+"/withdrawals"), chromedp.WaitVisible(chromedp.ID("pending")),
		chromedp.Focus(chromedp.CSS(fmt.Sprintf(`#w-%s a[href$="/approve"]`, w.WithdrawalID))), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.ID("signed-action")))
	_, err := chromedp.Run(ada.Ctx, chromedp.Poll[bool](`document.readyState === "complete"`))
	require.NoError(t, err)
	ada.Do(chromedp.Focus(chromedp.ID("note")), chromedp.KeyEvent("\t"), chromedp.KeyEvent("\r"))
	require.Contains(t, ada.Text("#result"), "is approved (approved by op:ada)")
	require.Equal(t, withdrawal.StatusApproved, e.read(t, w.WithdrawalID).Status)
	require.Empty(t, ada.Errors(), "console errors")
}
