// Package browsertest drives a real Chromium from Go tests (chromedp): one
// headless browser per package's test run, a browser context of its own
// (cookies, storage) per test, a virtual WebAuthn authenticator that can
// hold an operator's passkey, the page's console messages, and a
// screenshot of the page when a test fails.
//
// Chromium is Debian's chromium package: $SVC_CHROMIUM, else the first
// chromium on PATH, else scripts/chromium.sh installs it (scripts/test.sh
// runs it beside the other tests, and the browser tests once it and the race suite are done). When none can be had the test fails, saying
// why: a browser test is never skipped.
//
// A package's tests share the browser through TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(browsertest.Run(m)) }
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"svc/platform/dbtest"
)

// Timeout bounds each test's use of its page.
const Timeout = 60 * time.Second

var shared struct {
	once    sync.Once
	err     error
	ctx     context.Context // the browser's
	cancel  func()
	dataDir string
}

// Run runs a package's tests and then stops the browser they shared.
func Run(m *testing.M) int {
	code := m.Run()
	if shared.cancel != nil {
		shared.cancel()
		_ = os.RemoveAll(shared.dataDir)
	}
	return code
}

// Flags are Chromium's command-line flags for the tests: headless, as root
// (no sandbox), without the background traffic that a closed network makes
// slow (networking, component updates, sync, QUIC), and with a fresh
// profile (UserDataDir).
func flags(bin, dataDir string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoSandbox,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(dataDir),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(1280, 900),
	}
}

// browser starts the shared browser once.
func browser() (context.Context, error) {
	shared.once.Do(func() {
		bin, err := Chromium()
		if err != nil {
			shared.err = err
			return
		}
		if shared.dataDir, err = os.MkdirTemp("", "browsertest-profile-"); err != nil {
			shared.err = err
			return
		}
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags(bin, shared.dataDir)...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		if err := chromedp.Do(ctx); err != nil { // starts the browser
			cancelCtx()
			cancelAlloc()
			shared.err = fmt.Errorf("browsertest: start %s: %w", bin, err)
			return
		}
		shared.ctx, shared.cancel = ctx, func() { cancelCtx(); cancelAlloc() }
	})
	return shared.ctx, shared.err
}

// Chromium is the path of the Chromium to drive: $SVC_CHROMIUM, the first
// chromium on PATH, or the one scripts/chromium.sh installs.
func Chromium() (string, error) {
	if p := os.Getenv("SVC_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	cmd := exec.Command(filepath.Join(dbtest.ModuleRoot(), "scripts", "chromium.sh"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("browsertest: no Chromium, and scripts/chromium.sh could not install it: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// Page is a test's tab, in a browser context of its own.
type Page struct {
	// Ctx runs the test's actions (chromedp.Do, chromedp.Run); it ends
	// after Timeout.
	Ctx context.Context
	t   testing.TB

	mu       sync.Mutex
	messages []chromedp.ConsoleMessage
}

// New opens a tab for t in a new browser context of the shared browser.
// When t fails, a screenshot of the tab is saved under .data/browsertest
// in the module (git-ignored) and its path logged.
func New(t testing.TB) *Page {
	t.Helper()
	bctx, err := browser()
	if err != nil {
		t.Fatal(err)
	}
	tab, cancelTab := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("browsertest: open a tab: %v", err)
	}
	ctx, cancel := context.WithTimeout(tab, Timeout)
	t.Cleanup(cancel)
	p := &Page{Ctx: ctx, t: t}
	msgs := chromedp.Console(tab)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.messages = append(p.messages, m)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			p.screenshot(tab)
		}
	})
	return p
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// screenshot saves the tab as it is now and logs where.
func (p *Page) screenshot(tab context.Context) {
	ctx, cancel := context.WithTimeout(tab, 10*time.Second)
	defer cancel()
	img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("browsertest: no screenshot: %v", err)
		return
	}
	dir := filepath.Join(dbtest.ModuleRoot(), ".data", "browsertest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Logf("browsertest: no screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, unsafeName.ReplaceAllString(p.t.Name(), "_")+"-"+time.Now().UTC().Format("20060102T150405")+".png")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		p.t.Logf("browsertest: no screenshot: %v", err)
		return
	}
	p.t.Logf("browsertest: screenshot of the failed test's page: %s", path)
}

// Do runs actions on the page, failing the test on an error.
func (p *Page) Do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.Ctx, actions...); err != nil {
		p.t.Fatalf("browsertest: %v", err)
	}
}

// Text is the text of the first element sel selects (CSS), once visible.
func (p *Page) Text(sel string) string {
	p.t.Helper()
	p.Do(chromedp.WaitVisible(chromedp.CSS(sel)))
	s, err := chromedp.Run(p.Ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("browsertest: text of %s: %v", sel, err)
	}
	return s
}

// Location is the page's URL.
func (p *Page) Location() string {
	p.t.Helper()
	s, err := chromedp.Run(p.Ctx, chromedp.Location())
	if err != nil {
		p.t.Fatalf("browsertest: location: %v", err)
	}
	return s
}

// Messages are the console messages the page has written so far: calls
// of the console API, uncaught exceptions, and the browser's log (a
// resource that failed to load, a Content-Security-Policy violation).
func (p *Page) Messages() []chromedp.ConsoleMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]chromedp.ConsoleMessage(nil), p.messages...)
}

// Errors are the messages of type error or exception, as text.
func (p *Page) Errors() []string {
	var out []string
	for _, m := range p.Messages() {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m.Text, m.URL, m.Line+1))
		}
	}
	return out
}

// Passkey is a credential for the virtual authenticator: an ES256 key on
// P-256 (PKCS #8 DER), discoverable, for the relying party RPID.
type Passkey struct {
	RPID         string
	CredentialID []byte
	PKCS8        []byte
	UserHandle   []byte
}

// AddAuthenticator gives the page's browser context a virtual platform
// authenticator (CTAP2, internal transport, resident keys, user
// verification that succeeds, presence simulated) holding the passkeys.
func (p *Page) AddAuthenticator(keys ...Passkey) webauthn.AuthenticatorID {
	p.t.Helper()
	if _, err := chromedp.Call(p.Ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		p.t.Fatalf("browsertest: WebAuthn.enable: %v", err)
	}
	res, err := chromedp.Call(p.Ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
		Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21,
			Transport: webauthn.AuthenticatorTransportInternal, HasResidentKey: true, HasUserVerification: true,
			IsUserVerified: true, AutomaticPresenceSimulation: true,
			// The protocol types send every credential with its CMTG fields,
			// which an authenticator without the extension refuses.
			HasCmtgKey: true,
		},
	})
	if err != nil {
		p.t.Fatalf("browsertest: WebAuthn.addVirtualAuthenticator: %v", err)
	}
	for _, k := range keys {
		_, err := chromedp.Call(p.Ctx, webauthn.AddCredential, webauthn.AddCredentialParams{
			AuthenticatorID: res.AuthenticatorID,
			Credential: &webauthn.Credential{CredentialID: k.CredentialID, IsResidentCredential: true, RpID: k.RPID,
				PrivateKey: k.PKCS8, UserHandle: k.UserHandle, SignCount: 1},
		})
		if err != nil {
			p.t.Fatalf("browsertest: WebAuthn.addCredential: %v", err)
		}
	}
	return res.AuthenticatorID
}
