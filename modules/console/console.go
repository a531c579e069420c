// Package console is the operators' web console: server-rendered pages
// (html/template, with htmx for partial updates) that an enrolled operator
// signs in to with their passkey, served by svc admin console on
// CONSOLE_ADDR.
//
// It is a module, not a platform package, because it is a view of the
// modules: it reads and acts only through their services (operator,
// audit, ...), exactly as the API's handlers do, and holds no rule of its
// own about money, operators or limits.
//
// Why pages rendered on the server rather than a single-page application:
// every rule already lives in Go, next to the data; a page rendered from
// the services shows what they say without a second model of the
// resources in JavaScript, without a JSON API beside the admin API, and
// without a JavaScript build. The browser runs two scripts, both embedded
// in the binary: htmx at a pinned version (assets/htmx-VERSION.min.js,
// its checksum tested) and console.js, which asks the passkey for its
// signature (WebAuthn needs the browser's API).
//
// Security properties (docs/operations.md, "Console"):
//   - sign-in: the operator's passkey signs a statement (action
//     console.sign_in) the console made for this sign-in: a fresh random
//     nonce, single use, bound to the browser's sign-in cookie; it is
//     verified by the operator module as any signed action (enrolled,
//     unrevoked passkey; origin and RP ID; user verification; freshness)
//     and recorded in the audit trail, whose unique nonce refuses a second
//     use;
//   - sessions: an HttpOnly, SameSite=Strict cookie (Secure in production
//     and over HTTPS) naming a session held in this process's memory: one
//     console process serves the operators, and its restart signs everyone
//     out. A session ends after IdleTimeout without a request, after
//     MaxLifetime whatever its use, when its operator or key is revoked in
//     the enrollment chain, and on sign-out;
//   - every change is an action signed by the session's passkey, shown
//     for confirmation first and verified by the module's service
//     (signed.go);
//   - every request that changes something carries the session's CSRF
//     token (a form's hidden field or the X-CSRF-Token header) and comes
//     from the console's own origin (http.CrossOriginProtection);
//   - a strict Content-Security-Policy: scripts, styles and images from
//     the console's origin only, no inline script or style, no eval; no
//     framing; every asset is embedded in the binary.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/deposit"
	"svc/modules/event"
	"svc/modules/health"
	"svc/modules/liabilities"
	"svc/modules/operator"
	"svc/modules/reconcile"
	"svc/modules/withdrawal"
)

// MaxLifetime bounds a session whatever its use: the operator signs in
// again with their passkey at least this often.
const MaxLifetime = 12 * time.Hour

// ActionSignIn is the signed action of a sign-in, as the audit trail
// records it.
const ActionSignIn = "console.sign_in"

// signInResource is the sign-in statement's resource (the audit row's
// target).
const signInResource = "console"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// HTMX is the embedded htmx file, at its pinned version.
const HTMX = "htmx-2.0.11.min.js"

// Server is the console. Its zero value is not usable: New builds it.
type Server struct {
	opts     Options
	sessions *store
	pages    map[string]*template.Template
	assets   http.Handler
	minted   *mintedStore // apikeys.go
}

// Options are what the console needs.
type Options struct {
	// DB is the primary.
	DB bun.IDB
	// Operators verifies signatures and reads the enrollment chain; its
	// RP is the console's WebAuthn relying party.
	Operators *operator.Service
	// The overview's sources: readiness, the alerts, the reconciliation's
	// reports.
	Health    *health.Service
	Alerts    *alert.Service
	Reconcile *reconcile.Service
	// The money pages' services (withdrawals.go, review.go).
	Withdrawals *withdrawal.Service
	Deposits    *deposit.Service
	// The pages' services (pages.go).
	Events      *event.Service
	Endpoints   *event.EndpointService
	Keys        *apikey.Store
	Assets      *asset.Store
	Liabilities *liabilities.Service
	// IdleTimeout signs out a session unused this long (CONSOLE_IDLE_TIMEOUT).
	IdleTimeout time.Duration
	// Secure marks the cookies Secure (production, or HTTPS).
	Secure bool
	// HSTS sends Strict-Transport-Security (the console serves HTTPS).
	HSTS bool
	Now  func() time.Time
	Log  *slog.Logger
}

// New builds the console.
func New(o Options) (*Server, error) {
	if o.DB == nil || o.Operators == nil || o.Health == nil || o.Alerts == nil || o.Reconcile == nil || o.Withdrawals == nil || o.Deposits == nil {
		return nil, errors.New("console: DB, Operators, Health, Alerts, Reconcile, Withdrawals and Deposits are required")
	}
	if err := o.checkPages(); err != nil {
		return nil, err
	}
	if o.IdleTimeout <= 0 {
		return nil, errors.New("console: the idle timeout must be positive")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		return nil, err
	}
	return &Server{opts: o, sessions: newStore(), pages: pages, assets: http.StripPrefix("/assets/", http.FileServerFS(sub)),
		minted: &mintedStore{keys: map[string]mintedKey{}}}, nil
}

func (s *Server) now() time.Time { return s.opts.Now() }

// Handler is the console's HTTP handler: every route behind the security
// headers and the cross-origin check.
//
//	GET  /assets/{file}      the embedded scripts and styles
//	GET  /sign-in            the sign-in page
//	POST /sign-in/challenge  the statement to sign for a sign-in (JSON)
//	POST /sign-in            the passkey's signature: a session (JSON)
//	GET  /passkeys/new       the page that makes a passkey
//	POST /passkeys/challenge the challenge of a passkey to make (JSON)
//	POST /passkeys           the new passkey: its public key to enroll (JSON)
//	POST /sign-out           ends the session
//	GET  /                   the overview (signed in)
//	GET  /overview           the overview's part, for htmx's refresh
//	...                      the money pages: moneyRoutes (signed.go), and the
//	                         other pages: pageRoutes (pages.go)
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /assets/{file}", s.handleAsset)
	mux.HandleFunc("GET /sign-in", s.handleSignInPage)
	mux.HandleFunc("POST /sign-in/challenge", s.handleChallenge)
	mux.HandleFunc("POST /sign-in", s.handleSignIn)
	mux.HandleFunc("GET /passkeys/new", s.handlePasskeyPage)
	mux.HandleFunc("POST /passkeys/challenge", s.handleCreationChallenge)
	mux.HandleFunc("POST /passkeys", s.handlePasskeyCreated)
	mux.Handle("POST /sign-out", s.authed(s.checkCSRF(http.HandlerFunc(s.handleSignOut))))
	mux.Handle("GET /{$}", s.authed(http.HandlerFunc(s.handleOverview)))
	mux.Handle("GET /overview", s.authed(http.HandlerFunc(s.handleOverview)))
	s.moneyRoutes(mux)
	s.pageRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "There is no such page.")
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusForbidden, "A request from another site was refused.")
	}))
	return s.headers(cop.Handler(mux))
}

// handleAsset serves an embedded file. The scripts and styles change only
// with the binary; htmx's name carries its version.
func (s *Server) handleAsset(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	s.assets.ServeHTTP(w, r)
}

// parsePages parses each page with the layout and the parts (the
// templates whose file name starts with "_", which pages include and htmx
// asks for alone).
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	parts, err := fs.Glob(templateFS, "templates/_*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" || strings.HasPrefix(base, "_") {
			continue
		}
		files := append([]string{"templates/layout.html", n}, parts...)
		t, err := template.New("layout.html").Funcs(template.FuncMap{"htmx": func() string { return HTMX }}).
			ParseFS(templateFS, files...)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", base, err)
		}
		out[base] = t
	}
	return out, nil
}

// page is what every page's template gets.
type page struct {
	Title   string
	Session *session // nil on the sign-in and error pages
	CSRF    string   // the token of the session, or of the sign-in
	Notice  string
	Data    any
}

// render writes a page with status.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	s.renderPart(w, r, status, name, "layout.html", p)
}

// renderPart writes the template part of page name (the whole page when
// part is layout.html) with status.
func (s *Server) renderPart(w http.ResponseWriter, r *http.Request, status int, name, part string, p page) {
	t, ok := s.pages[name]
	if !ok {
		panic("console: no page " + name)
	}
	if p.Session == nil {
		p.Session = sessionFrom(r.Context())
	}
	if p.Session != nil && p.CSRF == "" {
		p.CSRF = p.Session.CSRF
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := t.ExecuteTemplate(w, part, p); err != nil {
		s.opts.Log.Error("console: render", "page", name, "error", err)
	}
}

// fail writes the error page (a JSON error to a script's request).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if wantsJSON(r) {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	s.render(w, r, status, "error.html", page{Title: http.StatusText(status), Notice: msg})
}

type ctxKey struct{}

func sessionFrom(ctx context.Context) *session {
	se, _ := ctx.Value(ctxKey{}).(*session)
	return se
}
