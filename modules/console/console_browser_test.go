package console_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"svc/modules/alert"
	"svc/modules/console"
	"svc/modules/deposit"
	"svc/modules/health"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/reconcile"
	"svc/modules/withdrawal"
	"svc/platform/browsertest"
	"svc/platform/clock"
	"svc/platform/db"
	"svc/platform/dbtest"
)

func TestMain(m *testing.M) { os.Exit(browsertest.Run(m)) }

// idle is the tests' session idle timeout; the clock is advanced past it,
// never waited for.
const idle = 15 * time.Minute

// env is one console on a fresh database, with an admin (root, an Ed25519
// key) and an approver (ada) enrolled with a passkey.
type env struct {
	URL     string // http://localhost:PORT
	DB      *db.DB
	Clock   *clock.Fake
	Passkey *operatortest.Passkey
	Root    *operator.Signer // root's key
	Ops     *operator.Service

	pagesEnv // the pages' services: pages_browser_test.go
}

// newEnv starts a console; opts change its options.
func newEnv(t *testing.T, opts ...func(*console.Options)) *env {
	t.Helper()
	d := dbtest.New(t)
	clk := clock.NewFake(time.Now())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	e := &env{URL: "http://localhost:" + port, DB: d, Clock: clk, Passkey: operatortest.NewPasskey("localhost")}

	root := operatortest.Team(t, d.Bun, clk.Now, operatortest.Member{Name: "root", Role: operator.Admin})["root"]
	ops := &operator.Service{DB: d.Bun, Now: clk.Now, RP: operator.RelyingParty{ID: "localhost", Origins: []string{e.URL}}}
	ctx := context.Background()
	head, err := ops.Head(ctx, d.Bun)
	require.NoError(t, err)
	c := operator.Change{Action: operator.ActionEnroll, Name: "ada", Role: operator.Approver, PublicKey: e.Passkey.Public().String()}
	_, err = ops.Submit(ctx, operatortest.Sign(t, root, c.Statement(head, clk.Now())))
	require.NoError(t, err)

	e.Root, e.Ops = root, ops
	o := console.Options{DB: d.Bun, Operators: ops, IdleTimeout: idle, Now: clk.Now, Log: slog.New(slog.DiscardHandler),
		Health:      &health.Service{DB: d.Bun, Now: clk.Now, StaleAfter: time.Minute},
		Alerts:      &alert.Service{DB: d.Bun, Now: clk.Now},
		Reconcile:   &reconcile.Service{DB: d.Bun, Now: clk.Now},
		Withdrawals: &withdrawal.Service{DB: d.Bun, Operators: ops, Now: clk.Now}, Deposits: &deposit.Service{DB: d.Bun, Operators: ops, Now: clk.Now}}
	e.pages(t, d, &o)
	for _, f := range opts {
		f(&o)
	}
	srv, err := console.New(o)
	require.NoError(t, err)
	serve(t, ln, srv.Handler())
	return e
}

// page opens a tab whose authenticator holds ada's passkey.
func (e *env) page(t *testing.T) *browsertest.Page {
	p := browsertest.New(t)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	p.AddAuthenticator(browsertest.Passkey{RPID: "localhost", CredentialID: id, PKCS8: e.Passkey.PKCS8(), UserHandle: []byte("ada")})
	return p
}

// signIn signs ada in from the sign-in page and waits for the overview.
func (e *env) signIn(t *testing.T, p *browsertest.Page) { e.signInAs(t, p, "ada") }

// signInAs signs name in from the sign-in page and waits for the overview.
func (e *env) signInAs(t *testing.T, p *browsertest.Page, name string) {
	t.Helper()
	p.Do(chromedp.Navigate(e.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("sign-in")),
		chromedp.SendKeys(chromedp.ID("name"), name),
		chromedp.Click(chromedp.CSS("#sign-in button[type=submit]")),
		chromedp.WaitVisible(chromedp.ID("who")))
	require.Contains(t, p.Text("#who"), name)
}

// TestSignInWithPasskey: ada opens the console, is sent to the sign-in
// page, signs in with her passkey (the browser's virtual authenticator
// holds its private key), and sees the overview; the sign-in is in the
// audit trail as signed by her passkey; every page carries the console's
// Content-Security-Policy, and none writes an error to the console (no
// blocked script or style, no failed request).
func TestSignInWithPasskey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.page(t)

	res, err := chromedp.Run(p.Ctx, chromedp.NavigateResponse(e.URL+"/"))
	require.NoError(t, err)
	require.Equal(t, e.URL+"/sign-in", p.Location())
	require.Equal(t, console.ContentSecurityPolicy, res.Headers["Content-Security-Policy"])
	e.signIn(t, p)
	require.Equal(t, e.URL+"/", p.Location())
	require.Contains(t, p.Text("#who"), "approver")
	res, err = chromedp.Run(p.Ctx, chromedp.NavigateResponse(e.URL+"/"))
	require.NoError(t, err)
	require.Equal(t, console.ContentSecurityPolicy, res.Headers["Content-Security-Policy"])
	p.Do(chromedp.WaitVisible(chromedp.ID("who")))
	htmx, err := chromedp.Run(p.Ctx, chromedp.Evaluate[string]("typeof htmx === 'object' ? htmx.version : 'missing'"))
	require.NoError(t, err)
	require.Equal(t, "2.0.11", htmx, "htmx loads under the policy")
	require.Empty(t, p.Errors(), "console errors")

	var operatorName, keyID, target string
	require.NoError(t, e.DB.Bun.NewRaw("SELECT operator, key_id, target FROM audit_log WHERE action = ?", console.ActionSignIn).
		Scan(context.Background(), &operatorName, &keyID, &target))
	require.Equal(t, "ada", operatorName)
	require.Equal(t, e.Passkey.Public().ID(), keyID)
	require.Equal(t, "console", target)

	// svc admin audit verify's check holds with the sign-in's row.
	x, err := operator.ExportAudit(context.Background(), e.DB.Bun, e.Ops.RP, e.Clock.Now())
	require.NoError(t, err)
	rep := operator.VerifyAudit(x, false)
	require.True(t, rep.OK, "%+v", rep.Failures)
	var signed int
	require.NoError(t, e.DB.Bun.NewRaw("SELECT count(*) FROM audit_log WHERE signature IS NOT NULL").Scan(context.Background(), &signed))
	require.Equal(t, signed, rep.Signed, "every signed row was checked, the sign-in's too")
}

// TestFormWithoutCSRFTokenIsRefused: the sign-out form posted without its
// CSRF token is refused (403) and the session goes on.
func TestFormWithoutCSRFTokenIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.Evaluate[chromedp.Void](`document.querySelector("#sign-out input[name=csrf]").remove()`),
		chromedp.Click(chromedp.CSS("#sign-out button")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	require.Contains(t, p.Text("#notice"), "security token is missing or wrong")
	require.Contains(t, p.Text("h1"), "Forbidden")

	p.Do(chromedp.Navigate(e.URL + "/"))
	require.Contains(t, p.Text("#who"), "ada", "still signed in")
}

// TestIdleSessionIsRefused: a session unused for the idle timeout is
// over: the next page is the sign-in page, saying why.
func TestIdleSessionIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.page(t)
	e.signIn(t, p)
	e.Clock.Advance(idle - time.Second)
	p.Do(chromedp.Navigate(e.URL + "/"))
	require.Contains(t, p.Text("#who"), "ada", "used within the idle timeout")
	e.Clock.Advance(idle)
	p.Do(chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.ID("sign-in")))
	require.Equal(t, e.URL+"/sign-in?why=idle", p.Location())
	require.Contains(t, p.Text("#notice"), "expired")
}

// TestSignOut: signing out ends the session: the console's pages send
// the browser to the sign-in page again.
func TestSignOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.Click(chromedp.CSS("#sign-out button")), chromedp.WaitVisible(chromedp.ID("sign-in")))
	require.Equal(t, e.URL+"/sign-in?why=signed-out", p.Location())
	require.Contains(t, p.Text("#notice"), "signed out")
	p.Do(chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.ID("sign-in")))
	require.True(t, strings.HasPrefix(p.Location(), e.URL+"/sign-in"))
	require.Empty(t, p.Errors(), "console errors")
}

// TestOverview: the overview shows readiness as /readyz has it, the open
// alerts, and the last reconciliation report's line per asset; its
// Refresh reads them again into the page (htmx) without loading the page
// anew, and no page writes an error to the console.
func TestOverview(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, health.Beat(ctx, e.DB.Bun, "worker-1", e.Clock.Now()))
	alerts := &alert.Service{DB: e.DB.Bun, Now: e.Clock.Now}
	_, _, err := alerts.Raise(ctx, e.DB.Bun, alert.Params{Type: "event.dead", Subject: "evt_first", Detail: "delivery gave up"})
	require.NoError(t, err)
	shortfall, chain := "0.50000000", "1.00000000"
	report := reconcile.Stored{CreatedAt: e.Clock.Now(), Trigger: reconcile.TriggerHourly, Report: reconcile.Report{
		LedgerConsistent: true, Alerts: []string{"BTC insolvent by 0.50000000"},
		Custody: []reconcile.CustodyLine{{Asset: "BTC", LedgerCustody: "1.50000000", LedgerInFlight: "0.00000000",
			UserObligations: "1.50000000", ChainBalance: &chain, ChainSource: "processor", Shortfall: &shortfall, Insolvent: true}}}}
	_, err = e.DB.Bun.NewInsert().Model(&report).Exec(ctx)
	require.NoError(t, err)

	p := e.page(t)
	e.signIn(t, p)
	readiness := p.Text("#readiness")
	require.Contains(t, readiness, "Readiness: ready")
	require.Regexp(t, `database\s+ok`, readiness)
	require.Regexp(t, `worker\s+ok\s+last heartbeat`, readiness)
	require.Contains(t, p.Text("#alerts"), "Open alerts: 1")
	require.Contains(t, p.Text("#alerts"), "evt_first")
	rec := p.Text("#reconciliation")
	require.Contains(t, rec, "Reconciliation: unhealthy")
	require.Contains(t, rec, "BTC insolvent by 0.50000000")
	require.Regexp(t, `BTC\s+1.50000000\s+0.00000000\s+1.50000000\s+1.00000000\s+processor\s+0.50000000\s+insolvent`, rec)

	_, _, err = alerts.Raise(ctx, e.DB.Bun, alert.Params{Type: "tron.gas_low", Subject: "TRX", Detail: "top up the hot wallet"})
	require.NoError(t, err)
	p.Do(chromedp.Evaluate[chromedp.Void]("window.sameLoad = true"), chromedp.Click(chromedp.ID("refresh")))
	_, err = chromedp.Run(p.Ctx, chromedp.Poll[bool](`document.getElementById("alerts").textContent.includes("top up the hot wallet")`))
	require.NoError(t, err)
	require.Contains(t, p.Text("#alerts"), "Open alerts: 2")
	same, err := chromedp.Run(p.Ctx, chromedp.Evaluate[bool]("window.sameLoad === true"))
	require.NoError(t, err)
	require.True(t, same, "the refresh replaced a part of the page, not the page")
	require.Empty(t, p.Errors(), "console errors")
}

// TestOverviewRefreshAfterSessionEnds: htmx's refresh of a session that
// has ended takes the whole page to the sign-in page.
func TestOverviewRefreshAfterSessionEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.page(t)
	e.signIn(t, p)
	e.Clock.Advance(idle)
	p.Do(chromedp.Click(chromedp.ID("refresh")), chromedp.WaitVisible(chromedp.ID("sign-in")))
	require.Equal(t, e.URL+"/sign-in?why=idle", p.Location())
}

// TestMakePasskeyThenSignIn: a person with no passkey yet follows the
// sign-in page's link, has the browser make a passkey (the virtual
// authenticator starts empty) and reads its public key; once an admin has
// enrolled that key for them, they sign in with it.
func TestMakePasskeyThenSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := browsertest.New(t)
	p.AddAuthenticator()
	p.Do(chromedp.Navigate(e.URL+"/sign-in"), chromedp.Click(chromedp.ID("make-passkey")),
		chromedp.WaitVisible(chromedp.ID("passkey-new")),
		chromedp.SendKeys(chromedp.ID("name"), "bea"),
		chromedp.Click(chromedp.CSS("#passkey-new button[type=submit]")),
		chromedp.WaitVisible(chromedp.ID("passkey-made")))
	text, err := chromedp.Run(p.Ctx, chromedp.Value(chromedp.ID("public-key")))
	require.NoError(t, err)
	pub, err := operator.ParsePublicKey(text)
	require.NoError(t, err)
	require.Equal(t, operator.KindWebAuthn, pub.Kind)
	require.Equal(t, pub.ID(), p.Text("#key-id"))
	require.Contains(t, p.Text("#enroll-command"), "svc admin operators enroll --name bea --role ROLE --public-key "+text)
	require.Empty(t, p.Errors(), "console errors")

	e.change(t, operator.Change{Action: operator.ActionEnroll, Name: "bea", Role: operator.Viewer, PublicKey: text})
	e.signInAs(t, p, "bea")
	require.Contains(t, p.Text("#who"), "viewer")
}
