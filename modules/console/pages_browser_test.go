package console_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/console"
	"svc/modules/event"
	"svc/modules/health"
	"svc/modules/liabilities"
	"svc/modules/operator"
	"svc/modules/reconcile"
	"svc/platform/browsertest"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/queue"
)

// update writes the console's screenshots that docs/operations.md shows
// (docs/console/*.png): go test ./modules/console -run TestDocScreenshots -update.
var update = flag.Bool("update", false, "write docs/console/*.png, the screenshots docs/operations.md shows")

// pagesEnv are the services of the pages beyond the overview.
type pagesEnv struct {
	Events      *event.Service
	Endpoints   *event.EndpointService
	Keys        *apikey.Store
	Assets      *asset.Store
	Liabilities *liabilities.Service
}

// pages makes the pages' services and gives them to o.
func (e *env) pages(t *testing.T, d *db.DB, o *console.Options) {
	t.Helper()
	ins, err := queue.NewInserter(d.SQL, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	e.Events = &event.Service{DB: d.Bun, Inserter: ins, Now: e.Clock.Now, Operators: e.Ops}
	e.Endpoints = &event.EndpointService{DB: d.Bun, Now: e.Clock.Now, Sealer: event.DevelopmentSealer()}
	e.Keys = &apikey.Store{DB: d.Bun, Prefix: "svc", Mode: "test", Now: e.Clock.Now, Operators: e.Ops}
	e.Assets = &asset.Store{DB: d.Bun, Now: e.Clock.Now, Operators: e.Ops}
	e.Liabilities = &liabilities.Service{Pool: d.Pool, Log: slog.New(slog.DiscardHandler)}
	o.Events, o.Endpoints, o.Keys, o.Assets, o.Liabilities = e.Events, e.Endpoints, e.Keys, e.Assets, e.Liabilities
}

// deadEvent emits an event whose delivery then gave up.
func (e *env) deadEvent(t *testing.T) event.Event {
	t.Helper()
	ctx := t.Context()
	var ev event.Event
	require.NoError(t, db.RunInTx(ctx, e.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		var err error
		user := "user-1"
		ev, err = e.Events.Emit(ctx, tx, event.DepositSettled, event.DepositSettledData{DepositID: "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b",
			ExternalUserID: &user, Asset: "BTC", Status: "settled", AmountCredited: "0.00012345"})
		return err
	}))
	_, err := e.DB.Bun.NewRaw("UPDATE outbound_events SET status = 'dead', attempts = 10, dead_at = now(), last_error = ? WHERE id = ?",
		"HTTP 500 from the platform's webhook URL", ev.ID).Exec(ctx)
	require.NoError(t, err)
	return ev
}

// endpoint adds a webhook endpoint that takes every event.
func (e *env) endpoint(t *testing.T) event.Endpoint {
	t.Helper()
	url := "https://platform.example/hooks"
	var ep event.Endpoint
	require.NoError(t, db.RunInTx(t.Context(), e.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		var err error
		ep, _, err = e.Endpoints.Create(ctx, tx, event.EndpointParams{URL: &url, Events: &[]string{"*"}}, audit.CLI("root"))
		return err
	}))
	return ep
}

// killDelivery makes the delivery of ev to ep dead.
func (e *env) killDelivery(t *testing.T, ev event.Event, ep event.Endpoint) {
	t.Helper()
	res, err := e.DB.Bun.NewRaw("UPDATE webhook_deliveries SET status = 'dead', attempts = 10, dead_at = now(), last_error = ? WHERE event_id = ? AND endpoint_id = ?",
		"HTTP 502 from the endpoint", ev.ID, ep.ID).Exec(t.Context())
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// reports stores a reconciliation report a day for the last days days,
// BTC's difference moving around zero and its obligations growing.
func (e *env) reports(t *testing.T, days int) {
	t.Helper()
	for i := days - 1; i >= 0; i-- {
		diff := fmt.Sprintf("%.8f", float64(i%5-2)/1000)
		chain := "2.00000000"
		r := reconcile.Stored{CreatedAt: e.Clock.Now().Add(-time.Duration(i) * 24 * time.Hour), Trigger: reconcile.TriggerHourly,
			Healthy: true, Report: reconcile.Report{LedgerConsistent: true, Custody: []reconcile.CustodyLine{{Asset: "BTC",
				LedgerCustody: "2.00000000", LedgerInFlight: "0.00000000", UserObligations: fmt.Sprintf("%.8f", 1+float64(days-i)/10),
				ChainBalance: &chain, ChainSource: "processor", Difference: &diff}}}}
		_, err := e.DB.Bun.NewInsert().Model(&r).Exec(t.Context())
		require.NoError(t, err)
	}
}

// seed gives every page something to show.
func (e *env) seed(t *testing.T) event.Event {
	t.Helper()
	ep := e.endpoint(t)
	ev := e.deadEvent(t)
	e.killDelivery(t, ev, ep)
	require.NoError(t, health.Beat(t.Context(), e.DB.Bun, "worker-1", e.Clock.Now()))
	e.reports(t, 30)
	_, err := e.Liabilities.Snapshot(t.Context(), liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	_, _, err = e.Keys.Mint(t.Context(), apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "payments backend",
		AllowedCIDRs: []string{"10.0.0.0/8"}, ExpiresIn: 90 * 24 * time.Hour, Actor: audit.Actor{ID: "cli:root", Label: "root"}})
	require.NoError(t, err)
	return ev
}

// consolePages are the pages of pages.go, with their heading.
var consolePages = []struct{ path, h1 string }{
	{"/", "Overview"}, {"/events", "Events"}, {"/audit", "Audit trail"}, {"/liabilities", "Liabilities"},
	{"/api-keys", "API keys"}, {"/limits", "Assets and limits"}, {"/limits/BTC", "Limits of BTC"},
}

// TestPagesRender: every page renders for a signed-in operator at a
// desktop's size (1280×800) and a phone's (390×844) without a horizontal
// scroll, every control has a label (or an accessible name) and is in the
// tab order, and no page writes an error to the browser's console.
func TestPagesRender(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.seed(t)
	p := e.page(t)
	e.signIn(t, p)
	for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
		p.Do(chromedp.EmulateViewport(size[0], size[1]))
		for _, pg := range consolePages {
			p.Do(chromedp.Navigate(e.URL+pg.path), chromedp.WaitVisible(chromedp.CSS("main h1")))
			require.Equal(t, pg.h1, p.Text("main h1"), pg.path)
			requireFits(t, p, pg.path)
			unlabeled, err := chromedp.Run(p.Ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
				.filter(el => el.labels.length === 0 && !el.getAttribute("aria-label")).map(el => el.outerHTML)`))
			require.NoError(t, err)
			require.Empty(t, unlabeled, "controls without a label on %s", pg.path)
			nameless, err := chromedp.Run(p.Ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("button, a")]
				.filter(el => !(el.getAttribute("aria-label") || el.textContent.trim())).map(el => el.outerHTML)`))
			require.NoError(t, err)
			require.Empty(t, nameless, "buttons or links without a name on %s", pg.path)
			untabbable, err := chromedp.Run(p.Ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, summary")]
				.filter(el => el.tabIndex < 0 || el.disabled).map(el => el.outerHTML)`))
			require.NoError(t, err)
			require.Empty(t, untabbable, "controls out of the tab order on %s", pg.path)
		}
	}
	// The keyboard alone reaches the mint form's first field.
	p.Do(chromedp.EmulateViewport(1280, 800), chromedp.Navigate(e.URL+"/api-keys"), chromedp.WaitVisible(chromedp.ID("label")))
	reached := false
	for range 60 {
		p.Do(chromedp.KeyEvent("\t"))
		id, err := chromedp.Run(p.Ctx, chromedp.Evaluate[string]("document.activeElement.id"))
		require.NoError(t, err)
		if reached = id == "label"; reached {
			break
		}
	}
	require.True(t, reached, "Tab reaches the label field")
	require.Empty(t, p.Errors(), "console errors")
}

// requireFits fails when the page scrolls sideways.
func requireFits(t *testing.T, p *browsertest.Page, what string) {
	t.Helper()
	fits, err := chromedp.Run(p.Ctx, chromedp.Evaluate[bool]("document.documentElement.scrollWidth <= window.innerWidth"))
	require.NoError(t, err)
	require.True(t, fits, "%s overflows", what)
}

// TestOverviewChart: the overview draws each asset's custody difference
// and obligations over the last 30 days of stored reports (SVG, no
// script), with a title, a description and a table of each day's last
// report as its text alternative, and no error in the browser's console.
func TestOverviewChart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.reports(t, 40) // 10 of them older than 30 days
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.WaitVisible(chromedp.ID("charts")))
	n, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelector("#chart-BTC-obligations polyline").getAttribute("points").split(" ").length`))
	require.NoError(t, err)
	require.Equal(t, 30, n, "the reports of the last 30 days")
	// An SVG's title and description are not "visible" to chromedp's
	// Text: read their text content.
	alt, err := chromedp.Run(p.Ctx, chromedp.Evaluate[[]string](`["title", "desc"].map(s => document.querySelector("#chart-BTC-difference " + s).textContent)`))
	require.NoError(t, err)
	require.Contains(t, alt[0], "BTC: custody difference")
	require.Contains(t, alt[1], "30 reports")
	require.Contains(t, alt[1], "lowest -0.00200000, highest 0.00200000")
	rows, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#charts-BTC details tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 30, rows)
	zero, err := chromedp.Run(p.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart-BTC-difference line.zero").length`))
	require.NoError(t, err)
	require.Equal(t, 1, zero, "the difference crosses zero: its line is drawn")
	require.Empty(t, p.Errors(), "console errors")
}

// TestRedeliverDeadEvent: the events page lists a dead event with its last
// error, and a dead delivery to a webhook endpoint with its own; Redeliver
// shows the statement to sign, the passkey signs it, and the event
// service has the delivery pending again (that endpoint's alone, then the
// event's), each redelivery in the audit trail as the operator's signed
// action.
func TestRedeliverDeadEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ep := e.endpoint(t)
	ev := e.deadEvent(t)
	e.killDelivery(t, ev, ep)
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.Navigate(e.URL+"/events"), chromedp.WaitVisible(chromedp.ID("dead-events")))
	require.Contains(t, p.Text("#event-"+ev.PublicID()), "HTTP 500 from the platform's webhook URL")
	row := "#delivery-" + ev.PublicID() + "-" + ep.ID.String()
	require.Contains(t, p.Text(row), "HTTP 502 from the endpoint")

	// The endpoint's delivery alone.
	p.Do(chromedp.Click(chromedp.CSS(row+" a")), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, ep.ID.String(), p.Text("#confirm-endpoint_id"))
	require.Contains(t, sign(t, p), "queued for redelivery")
	p.Do(chromedp.Navigate(e.URL+"/events"), chromedp.WaitVisible(chromedp.ID("dead-events")))
	require.Contains(t, p.Text("#dead-deliveries"), "No dead webhook delivery.")
	dead, err := e.Endpoints.ListDeliveries(t.Context(), event.DeliveryListParams{Status: event.StatusDead})
	require.NoError(t, err)
	require.Empty(t, dead)
	got, err := e.Events.Get(t.Context(), ev.ID)
	require.NoError(t, err)
	require.Equal(t, event.StatusDead, got.Status, "the event's own delivery is left as it is")

	// The event's own.
	p.Do(chromedp.Click(chromedp.CSS("#event-"+ev.PublicID()+" a")), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "event.redeliver", p.Text("#confirm-action"))
	require.Equal(t, ev.PublicID(), p.Text("#confirm-resource"))
	require.Contains(t, sign(t, p), "queued for redelivery")
	p.Do(chromedp.Navigate(e.URL+"/events"), chromedp.WaitVisible(chromedp.ID("dead-events")))
	require.Contains(t, p.Text("#dead-events"), "No dead event.")
	got, err = e.Events.Get(t.Context(), ev.ID)
	require.NoError(t, err)
	require.Equal(t, event.StatusPending, got.Status)

	var signed []string
	require.NoError(t, e.DB.Bun.NewRaw("SELECT actor FROM audit_log WHERE action = ? AND target = ? AND operator = 'ada' AND signature IS NOT NULL",
		audit.EventRedeliver, ev.PublicID()).Scan(t.Context(), &signed))
	require.Equal(t, []string{"op:ada", "op:ada"}, signed)
	require.Empty(t, p.Errors(), "console errors")
}

// TestMintAndRevokeKey: an admin mints a key (the passkey signs
// apikey.mint); its secret is on the page the mint leads to, which a
// reload no longer shows; the key authenticates. Revoked from the list
// (the passkey signs apikey.revoke), it no longer authenticates. It runs
// at a phone's size (390×844): the confirmation and the secret's pages
// fit it.
func TestMintAndRevokeKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.change(t, operator.Change{Action: operator.ActionSetRole, Name: "ada", Role: operator.Admin})
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.EmulateViewport(390, 844))
	p.Do(chromedp.Navigate(e.URL+"/api-keys"), chromedp.WaitVisible(chromedp.ID("mint-form")),
		chromedp.SendKeys(chromedp.ID("label"), "reports"),
		chromedp.SetValue(chromedp.ID("scope"), "read_only"),
		chromedp.SendKeys(chromedp.ID("expires_in"), "720h"),
		chromedp.Click(chromedp.CSS("#mint-form button")),
		chromedp.WaitVisible(chromedp.ID("signed-action")))
	requireFits(t, p, "the mint's confirmation")
	require.Equal(t, "apikey.mint", p.Text("#confirm-action"))
	require.Equal(t, "720h0m0s", p.Text("#confirm-expires_in"))
	require.Contains(t, sign(t, p), "is minted")
	secret, err := chromedp.Run(p.Ctx, chromedp.Value(chromedp.ID("secret")))
	require.NoError(t, err)
	require.Regexp(t, `^svc_test_[A-Za-z0-9_-]{43}$`, secret)
	k, err := e.Keys.Authenticate(t.Context(), secret)
	require.NoError(t, err)
	require.Equal(t, "reports", k.Label)
	require.Equal(t, apikey.ScopeReadOnly, k.Scope)
	require.Equal(t, k.ID, p.Text("#minted-id"))
	requireFits(t, p, "the minted key's page")

	p.Do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("who")))
	require.Equal(t, e.URL+"/", p.Location(), "the result page is read once")
	html, err := chromedp.Run(p.Ctx, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
	require.NoError(t, err)
	require.NotContains(t, html, secret, "a reload does not show the secret")
	p.Do(chromedp.Navigate(e.URL+"/api-keys"), chromedp.WaitVisible(chromedp.ID("key-"+k.ID)))
	html, err = chromedp.Run(p.Ctx, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
	require.NoError(t, err)
	require.NotContains(t, html, secret)

	p.Do(chromedp.Click(chromedp.CSS("#key-"+k.ID+" a")), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "apikey.revoke", p.Text("#confirm-action"))
	require.Contains(t, sign(t, p), "Key "+k.ID+" is revoked")
	_, err = e.Keys.Authenticate(t.Context(), secret)
	require.ErrorIs(t, err, apikey.ErrInvalid)
	var signed int
	require.NoError(t, e.DB.Bun.NewRaw("SELECT count(*) FROM audit_log WHERE action IN (?, ?) AND target = ? AND operator = 'ada'",
		audit.KeyMint, audit.KeyRevoke, k.ID).Scan(t.Context(), &signed))
	require.Equal(t, 2, signed, "the mint and the revocation are ada's signed actions")
	require.Empty(t, p.Errors(), "console errors")
}

// TestAuditRowsVerified: the audit page shows the sign-in's row as
// verified (svc admin audit verify's check) and an unsigned row as not
// signed; filtering by action keeps that action's rows; a row whose
// signature does not verify is INVALID.
func TestAuditRowsVerified(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.NoError(t, db.RunInTx(t.Context(), e.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		_, err := audit.Record(ctx, tx, e.Clock.Now(), audit.Actor{ID: "cli:root", Label: "root"}, "liabilities.snapshot", "all", map[string]string{})
		return err
	}))
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.Navigate(e.URL+"/audit"), chromedp.WaitVisible(chromedp.ID("audit-rows")))
	require.Contains(t, p.Text("#trail-status"), "The trail verifies")
	signIn, err := chromedp.Run(p.Ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#audit-rows tbody tr")]
		.filter(tr => tr.cells[3].textContent === "console.sign_in").map(tr => tr.querySelector(".check").textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"verified"}, signIn)
	require.Contains(t, p.Text("#audit-rows"), "not signed")

	p.Do(chromedp.Evaluate[chromedp.Void](`document.body.classList.add("before-filter")`),
		chromedp.SendKeys(chromedp.ID("action"), "console.sign_in"), chromedp.Submit(chromedp.ID("audit-filter")),
		chromedp.WaitNotPresent(chromedp.CSS("body.before-filter")), chromedp.WaitVisible(chromedp.ID("audit-rows")))
	require.Equal(t, e.URL+"/audit?action=console.sign_in&target=", p.Location())
	actions, err := chromedp.Run(p.Ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#audit-rows tbody tr")].map(tr => tr.cells[3].textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"console.sign_in"}, actions)
	require.Empty(t, p.Errors(), "console errors")

	// A row whose signature does not verify (written by hand: the
	// service verifies every signature before it records one) is INVALID,
	// and the trail does not verify.
	require.NoError(t, db.RunInTx(t.Context(), e.DB.Bun, func(ctx context.Context, tx bun.Tx) error {
		_, err := audit.Record(ctx, tx, e.Clock.Now(), audit.Signed(audit.Signature{Operator: "ada", KeyID: e.Passkey.Public().ID(),
			Nonce: "forged", Envelope: []byte(`{"statement": "e30", "signature": "AAAA"}`)}), audit.EventRedeliver, "evt_forged", map[string]string{})
		return err
	}))
	p.Do(chromedp.Navigate(e.URL+"/audit?target=evt_forged"), chromedp.WaitVisible(chromedp.ID("audit-rows")))
	require.Contains(t, p.Text("#trail-status"), "does NOT verify")
	check, err := chromedp.Run(p.Ctx, chromedp.Evaluate[string](`document.querySelector("#audit-rows tbody tr .check").textContent`))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(check, "INVALID"), check)
}

// TestChangeLimits: an admin changes BTC's smallest withdrawal and turns
// its four-eyes threshold off from the assets page, whose form labels each
// field in sat, the unit it takes, with its current value in sat; the
// passkey signs asset.set_limits with the new values in display units,
// and the asset store has them.
func TestChangeLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.change(t, operator.Change{Action: operator.ActionSetRole, Name: "ada", Role: operator.Admin})
	before, err := e.Assets.Get(t.Context(), "BTC")
	require.NoError(t, err)
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.Navigate(e.URL+"/limits"), chromedp.WaitVisible(chromedp.ID("asset-BTC")),
		chromedp.Click(chromedp.CSS("#asset-BTC a")), chromedp.WaitVisible(chromedp.ID("limits-form")))
	require.Equal(t, fmt.Sprintf("Smallest withdrawal, in sat (now %d sat)", before.WithdrawalMin), p.Text(`label[for="withdrawal_min"]`))
	p.Do(chromedp.SendKeys(chromedp.ID("withdrawal_min"), "25000"),
		chromedp.SendKeys(chromedp.ID("withdrawal_four_eyes_threshold"), "off"),
		chromedp.Click(chromedp.CSS("#limits-form button")), chromedp.WaitVisible(chromedp.ID("signed-action")))
	require.Equal(t, "asset.set_limits", p.Text("#confirm-action"))
	require.Equal(t, "0.00025000", p.Text("#confirm-withdrawal_min"))
	require.Equal(t, "off", p.Text("#confirm-withdrawal_four_eyes_threshold"))
	require.Contains(t, sign(t, p), "The limits of BTC are changed")
	p.Do(chromedp.Navigate(e.URL+"/limits"), chromedp.WaitVisible(chromedp.ID("asset-BTC")))
	require.Regexp(t, `BTC.*\s+0.00025000\s`, p.Text("#asset-BTC"))
	a, err := e.Assets.Get(t.Context(), "BTC")
	require.NoError(t, err)
	require.EqualValues(t, 25000, a.WithdrawalMin)
	require.Nil(t, a.WithdrawalFourEyesThreshold)
	var actor string
	require.NoError(t, e.DB.Bun.NewRaw("SELECT actor FROM audit_log WHERE action = ? AND target = 'BTC' AND signature IS NOT NULL", audit.AssetSetLimits).
		Scan(t.Context(), &actor))
	require.Equal(t, "op:ada", actor)
	require.Empty(t, p.Errors(), "console errors")
}

// docShots are the screenshots docs/operations.md shows.
// The overview's is scrolled to its charts.
var docShots = []struct{ path, file, scrollTo string }{
	{"/", "overview.png", "#charts"}, {"/events", "events.png", ""}, {"/audit", "audit.png", ""},
}

// TestDocScreenshots writes docs/console/*.png at 1280×800 with -update.
func TestDocScreenshots(t *testing.T) {
	if !*update {
		t.Skip("writes the docs' screenshots with -update")
	}
	e := newEnv(t)
	e.seed(t)
	p := e.page(t)
	e.signIn(t, p)
	p.Do(chromedp.EmulateViewport(1280, 800))
	dir := filepath.Join(dbtest.ModuleRoot(), "docs", "console")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, s := range docShots {
		p.Do(chromedp.Navigate(e.URL+s.path), chromedp.WaitVisible(chromedp.CSS("main h1")))
		if s.scrollTo != "" {
			p.Do(chromedp.ScrollIntoView(chromedp.CSS(s.scrollTo)))
		}
		img, err := chromedp.Run(p.Ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, s.file), smallPNG(t, img), 0o644))
	}
	require.Empty(t, p.Errors(), "console errors")
}

// TestDocScreenshotsExist: every screenshot docs/operations.md shows is in
// docs/console, and small.
func TestDocScreenshotsExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(dbtest.ModuleRoot(), "docs", "operations.md"))
	require.NoError(t, err)
	refs := regexp.MustCompile(`\]\((console/[a-z0-9_-]+\.png)\)`).FindAllStringSubmatch(string(doc), -1)
	require.Len(t, refs, len(docShots), "docs/operations.md shows each screenshot")
	for _, r := range refs {
		fi, err := os.Stat(filepath.Join(dbtest.ModuleRoot(), "docs", r[1]))
		require.NoError(t, err, r[1])
		require.Less(t, fi.Size(), int64(100<<10), r[1])
	}
}

// smallPNG re-encodes a screenshot with a palette of its 256 most frequent
// colours (a page is mostly flat colour and antialiased text), which makes
// it a few tens of KB.
func smallPNG(t *testing.T, b []byte) []byte {
	t.Helper()
	src, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	counts := map[color.RGBA]int{}
	bounds := src.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			counts[color.RGBAModel.Convert(src.At(x, y)).(color.RGBA)]++
		}
	}
	all := slices.Collect(maps.Keys(counts))
	slices.SortFunc(all, func(a, b color.RGBA) int { return counts[b] - counts[a] })
	pal := make(color.Palette, 0, 256)
	for _, c := range all[:min(len(all), 256)] {
		pal = append(pal, c)
	}
	dst := image.NewPaletted(bounds, pal)
	draw.Draw(dst, bounds, src, bounds.Min, draw.Src)
	var out bytes.Buffer
	require.NoError(t, (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, dst))
	return out.Bytes()
}
