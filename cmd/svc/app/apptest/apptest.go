// Package apptest starts the whole service for end-to-end tests: a fresh
// migrated database, the API on a real loopback listener, optionally the
// River worker, and minted readwrite and admin keys. Every response that
// passes through Env.Do is validated against openapi.json.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"svc/cmd/svc/app"
	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/dbtest"
	"svc/platform/openapi/openapitest"
	"svc/platform/queue"
	"svc/platform/tracing"
)

// Env is one running service.
type Env struct {
	T          testing.TB
	App        *app.App
	URL        string // base URL of the API, e.g. http://127.0.0.1:41234
	MetricsURL string // base URL of the metrics listener (WithMetrics), else ""
	DBURL      string
	RW, Admin  string // minted keys
	AdminKeyID string
	Client     *http.Client
	Worker     *river.Client[pgx.Tx]
}

type settings struct {
	cfg     []func(*config.Config)
	clock   clock.Clock
	worker  bool
	tracing *tracing.Tracing
	spec    []byte
}

// Option changes how New starts the service.
type Option func(*settings)

// WithConfig edits the configuration before the service starts.
func WithConfig(fn func(*config.Config)) Option {
	return func(s *settings) { s.cfg = append(s.cfg, fn) }
}

// WithClock replaces the clock (a *clock.Fake for expiries and windows).
func WithClock(c clock.Clock) Option { return func(s *settings) { s.clock = c } }

// WithTracing makes spans with tp (tracing.NewProvider with an in-memory
// exporter); without it tracing is off, as with OTEL_EXPORTER_OTLP_ENDPOINT
// unset.
func WithTracing(tp trace.TracerProvider) Option {
	return func(s *settings) { s.tracing = tracing.New(tp) }
}

// WithSpec checks requests against spec, an OpenAPI document, instead of
// the committed openapi.json.
func WithSpec(spec []byte) Option { return func(s *settings) { s.spec = spec } }

// WithWorker also starts the River worker.
func WithWorker() Option { return func(s *settings) { s.worker = true } }

// WithMetrics also starts the metrics listener (METRICS_ADDR) on a free
// loopback port, as svc api and svc worker do (App.ServeMetrics).
func WithMetrics() Option {
	return WithConfig(func(c *config.Config) { c.Metrics.Addr = "127.0.0.1:0" })
}

// Config returns the test configuration before options: the service's
// defaults, on regtest with Lightning opted in, a quick worker heartbeat
// and short outbound timeouts so fault tests finish fast.
func Config(dbURL string) config.Config {
	c := config.Defaults()
	c.LogLevel = "warn"
	c.Database.URL = dbURL
	c.Chain.Network, c.Chain.LightningEnabled = "regtest", true
	c.HTTP.ShutdownTimeout = 5 * time.Second
	c.HTTP.ReadyzCacheTTL = 0 // readiness tests watch components change at once
	c.Worker.HeartbeatInterval, c.Worker.StaleAfter, c.Worker.Concurrency = time.Second, 30*time.Second, 10
	c.Webhooks.Timeout, c.BTCPay.Timeout, c.Tron.Timeout = 2*time.Second, 2*time.Second, 2*time.Second
	return c
}

// New starts the service on a fresh database; it stops when t ends.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var s settings
	for _, o := range opts {
		o(&s)
	}
	dbURL := dbtest.NewURL(t)
	cfg := Config(dbURL)
	for _, fn := range s.cfg {
		fn(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("apptest: %v", err)
	}
	level := slog.LevelWarn
	if os.Getenv("SVC_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	tw := &testWriter{t: t}
	t.Cleanup(func() { tw.done.Store(true) }) // registered first, runs last
	log := slog.New(tracing.NewLogHandler(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: level})))
	ctx := context.Background()
	a, err := app.New(ctx, cfg, log, app.Options{Clock: s.clock, Tracing: s.tracing, Spec: s.spec})
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	t.Cleanup(a.Close)
	if err := a.UseReplica(ctx); err != nil { // as svc api does
		t.Fatalf("apptest: %v", err)
	}
	srv := a.HTTP()
	ln, err := a.Listen(srv, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("apptest: listen: %v", err)
	}
	go func() { _ = srv.Listener(ln) }()
	t.Cleanup(func() { _ = srv.ShutdownWithTimeout(5 * time.Second) })
	e := &Env{T: t, App: a, URL: "http://" + ln.Addr().String(), DBURL: dbURL, Client: &http.Client{Timeout: 30 * time.Second}}
	maddr, stopMetrics, err := a.ServeMetrics()
	if err != nil {
		t.Fatalf("apptest: %v", err)
	}
	t.Cleanup(stopMetrics)
	if maddr != "" {
		e.MetricsURL = "http://" + maddr
	}
	// Minting is audited: two apikey.mint entries by cli:apptest open every
	// Env's audit trail. They are unsigned, through a store without the
	// operator service, whatever OPERATOR_SIGNATURES says: no operator is
	// enrolled yet.
	actor := audit.CLI("apptest")
	boot := &apikey.Store{DB: a.DB.Bun, Prefix: a.Keys.Prefix, Mode: a.Keys.Mode, Now: a.Keys.Now}
	_, e.RW, err = boot.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "test platform", Actor: actor})
	if err != nil {
		t.Fatalf("apptest: mint: %v", err)
	}
	var k apikey.Key
	k, e.Admin, err = boot.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeAdmin, Label: "test operator", Actor: actor})
	if err != nil {
		t.Fatalf("apptest: mint: %v", err)
	}
	e.AdminKeyID = k.ID
	if s.worker {
		e.StartWorker()
	}
	return e
}

// StartWorker starts the River worker (once); it stops when the test ends.
func (e *Env) StartWorker() {
	e.T.Helper()
	if e.Worker != nil {
		return
	}
	w, err := e.App.Worker(queue.WorkerParams{FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		e.T.Fatalf("apptest: worker: %v", err)
	}
	if err := w.Start(context.Background()); err != nil {
		e.T.Fatalf("apptest: start worker: %v", err)
	}
	e.Worker = w
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// StopWorker stops a started worker (to simulate a crash or a restart).
func (e *Env) StopWorker() {
	if e.Worker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Worker.Stop(ctx)
	e.Worker = nil
}

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test on error.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// FieldErrors decodes a 422 body's field errors ({detail: [...]}), failing
// the test when there are none.
func (r *Response) FieldErrors(t testing.TB) []map[string]any {
	t.Helper()
	var b struct {
		Detail []map[string]any `json:"detail"`
	}
	r.JSON(t, &b)
	if len(b.Detail) == 0 {
		t.Fatalf("field errors: none in %s", r.Body)
	}
	return b.Detail
}

// Map decodes the body into a generic map.
func (r *Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Req describes one request. Body may be nil, a []byte or string sent as
// is, or any value marshalled to JSON.
type Req struct {
	Method, Path string
	Body         any
	Key          string // API key; "" uses the readwrite key, "-" sends none
	Idem         string // Idempotency-Key; "" on POST generates one, "-" sends none
	Header       map[string]string
}

var seq atomic.Int64

// Do sends r and validates the response against openapi.json.
func (e *Env) Do(r Req) *Response {
	e.T.Helper()
	var body []byte
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		body = b
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			e.T.Fatalf("marshal: %v", err)
		}
	}
	req, err := http.NewRequest(r.Method, e.URL+r.Path, bytes.NewReader(body))
	if err != nil {
		e.T.Fatalf("request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch r.Key {
	case "":
		req.Header.Set("Authorization", "Bearer "+e.RW)
	case "-":
	default:
		req.Header.Set("Authorization", "Bearer "+r.Key)
	}
	if r.Method == http.MethodPost && !strings.HasPrefix(r.Path, "/webhooks/") {
		switch r.Idem {
		case "":
			req.Header.Set("Idempotency-Key", fmt.Sprintf("test-%s-%d", uuid.NewString(), seq.Add(1)))
		case "-":
		default:
			req.Header.Set("Idempotency-Key", r.Idem)
		}
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatalf("read body: %v", err)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		e.T.Errorf("%s %s: Cache-Control = %q, want no-store", r.Method, r.Path, cc)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	openapitest.ValidateResponse(e.T, req, body, resp, rb)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: rb}
}

// Get is Do with GET and the readwrite key.
func (e *Env) Get(path string) *Response { e.T.Helper(); return e.Do(Req{Method: "GET", Path: path}) }

// AdminGet is Do with GET and the admin key.
func (e *Env) AdminGet(path string) *Response {
	e.T.Helper()
	return e.Do(Req{Method: "GET", Path: path, Key: e.Admin})
}

// Post is Do with POST, the readwrite key and a fresh Idempotency-Key.
func (e *Env) Post(path string, body any) *Response {
	e.T.Helper()
	return e.Do(Req{Method: "POST", Path: path, Body: body})
}

// AdminPost is Do with POST, the admin key and a fresh Idempotency-Key.
func (e *Env) AdminPost(path string, body any) *Response {
	e.T.Helper()
	return e.Do(Req{Method: "POST", Path: path, Body: body, Key: e.Admin})
}

// Eventually polls cond until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testWriter sends log lines to t.Log until the test's cleanups are done;
// lines from goroutines that outlive the test are dropped.
type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
