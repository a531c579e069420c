// Package btcpaysim is a BTCPay Server simulator: it serves, from a real
// HTTP listener, the Greenfield 2.x paths and shapes that platform/btcpay
// calls (invoices, invoice payment methods, store payouts, store payment
// methods, server info, the on-chain wallet, the Lightning node balance),
// keeps its own state in memory, and sends signed webhooks the way BTCPay
// does. The service cannot tell it from the real thing; its fidelity is
// checked by the contract tests of platform/btcpay, which validate its
// traffic against BTCPay's published OpenAPI templates.
//
// It is driven by Go methods in tests and by a control API under /_sim/
// (for local runs): pay an invoice (one or several payments, before or
// after expiry), confirm payments, expire, mark settled or invalid by hand,
// complete, fail or stall payouts, set wallet balance and fee rate, receive
// BTC that matches no invoice, go down (errors, dropped connections,
// hanging) and come back, and hold, reorder, duplicate or redeliver
// webhooks. See docs/simulator.md.
//
// What it models, after BTCPay 2.4 (the invoice watcher's state machine):
//
//   - New -> Processing when paid in full (additionalStatus None or
//     PaidOver), -> Settled once every payment is settled (speed policy
//     confirmations; Lightning settles at once).
//   - New past its expiry -> Expired (PaidPartial when underpaid); paid in
//     full after expiry it stays Expired with PaidLate, and no
//     InvoiceSettled is sent.
//   - Processing past monitoringExpiration without settling -> Invalid.
//   - Marked Settled or Invalid by hand: additionalStatus Marked, possibly
//     with no payment at all.
//   - USDT-TRON invoices take addresses from a fixed pool (one open invoice
//     per address) and, like the plugin, see no payment once an invoice has
//     expired. A BOLT11 can be paid once and not after it expires.
package btcpaysim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/btcsuite/btcd/chaincfg"
	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

// Options configures a simulator. The zero value is a regtest store with
// BTC-CHAIN, BTC-LN and USDT-TRON enabled and random credentials.
type Options struct {
	Network        string   // mainnet, testnet, signet or regtest (default regtest)
	APIKey         string   // the only key accepted (default: random)
	StoreID        string   // the only store (default: random)
	PaymentMethods []string // the store's enabled payment methods (default BTC-CHAIN, BTC-LN, USDT-TRON)
	TronPool       []string // USDT-TRON address pool (default DefaultTronPool(20))

	WebhookURL    string // where webhooks go; empty sends none
	WebhookSecret string // HMAC key of BTCPay-Sig
	// WebhookRetryDelays are the waits before each retry of a delivery that
	// failed with a network error, 5xx, 408 or 429 (default BTCPay's: 10s,
	// 1m, then six times 10m).
	WebhookRetryDelays []time.Duration
	WebhookTimeout     time.Duration // one delivery attempt (default 10s)

	Rates   map[string]string // exchange rates such as "BTC_USD": "60000" (defaults below)
	FeeRate string            // wallet fee rate in sat/vB (default "2")
	Version string            // server version in /server/info (default "2.4.1")

	// Now is the simulator's clock (default time.Now). Tests that move a
	// fake clock call Tick afterwards to apply expiries at once.
	Now func() time.Time
	// TickEvery is how often expiries are applied in the background
	// (default 1s; negative: only on requests and Tick).
	TickEvery time.Duration
	// AutoCompletePayouts completes every approved payout at once with a
	// fresh txid (or Lightning preimage), like a store with an instant
	// payout processor.
	AutoCompletePayouts bool
	// OnUSDTPayment, when set, is told of every USDT-TRON payment the
	// simulator records (to mirror it on a TRON simulator).
	OnUSDTPayment func(USDTTransfer)
	// Mounts are more handlers served on the simulator's listener, by path
	// prefix ending in "/" (the TRON node simulator under "/tron/").
	Mounts map[string]http.Handler
	Log    *slog.Logger
}

// USDTTransfer is a USDT payment to a pool address.
type USDTTransfer struct {
	TxID    string
	To      string
	Amount  string // USDt, 6 decimals
	Invoice string
}

// Default exchange rates: method currency -> invoice currency.
var defaultRates = map[string]string{"BTC_USD": "60000", "USDT_USD": "1", "USDT_BTC": "0.0000166666666667"}

// Sim is one simulated BTCPay Server with one store.
type Sim struct {
	o   Options
	net *chaincfg.Params
	ln  *lightningNode
	log *slog.Logger
	now func() time.Time
	// lastTick is the simulator's time of the last pass over the deadlines
	// (Tick), under mu.
	lastTick time.Time
	rates    map[string]decimal.Decimal
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu       sync.Mutex
	methods  []string
	invoices map[string]*invoice
	invOrder []string
	payouts  map[string]*payout
	byDedup  map[string][]*payout // by destination (an address, a payment hash)
	payOrder []string
	listings int // GET .../payouts answered
	wallet   wallet
	feeRate  decimal.Decimal
	down     downState
	hooks    hookState

	srv *http.Server
	url string
}

// TB is the part of testing.TB that Start uses.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// New builds a simulator; Listen starts serving it.
func New(o Options) (*Sim, error) {
	if o.Network == "" {
		o.Network = "regtest"
	}
	net, err := NetParams(o.Network)
	if err != nil {
		return nil, err
	}
	if o.APIKey == "" {
		o.APIKey = randHex(20)
	}
	if o.StoreID == "" {
		o.StoreID = newID(32)
	}
	if o.PaymentMethods == nil {
		o.PaymentMethods = []string{btcpay.MethodBTCChain, btcpay.MethodBTCLN, btcpay.MethodUSDTTron}
	}
	if o.TronPool == nil {
		o.TronPool = DefaultTronPool(20)
	}
	if o.WebhookRetryDelays == nil {
		o.WebhookRetryDelays = []time.Duration{10 * time.Second, time.Minute}
		for range 6 {
			o.WebhookRetryDelays = append(o.WebhookRetryDelays, 10*time.Minute)
		}
	}
	if o.WebhookTimeout <= 0 {
		o.WebhookTimeout = 10 * time.Second
	}
	if o.FeeRate == "" {
		o.FeeRate = "2"
	}
	if o.Version == "" {
		o.Version = "2.4.1"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TickEvery == 0 {
		o.TickEvery = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	fee, err := decimal.Parse(o.FeeRate)
	if err != nil {
		return nil, fmt.Errorf("fee rate: %w", err)
	}
	rates := map[string]decimal.Decimal{}
	for _, src := range []map[string]string{defaultRates, o.Rates} {
		for k, v := range src {
			d, err := decimal.Parse(v)
			if err != nil || !d.IsPos() {
				return nil, fmt.Errorf("rate %s=%q: must be a positive decimal", k, v)
			}
			rates[strings.ToUpper(k)] = d
		}
	}
	node, err := newLightningNode(net)
	if err != nil {
		return nil, err
	}
	s := &Sim{o: o, net: net, ln: node, log: o.Log, now: func() time.Time { return o.Now().UTC().Truncate(time.Second) },
		rates: rates, invoices: map[string]*invoice{}, payouts: map[string]*payout{}, byDedup: map[string][]*payout{}, feeRate: fee}
	for _, m := range o.PaymentMethods {
		s.methods = append(s.methods, btcpay.NormalizeMethodID(m))
	}
	s.wallet = newWallet()
	s.hooks = hookState{url: o.WebhookURL, secret: o.WebhookSecret, webhookID: newID(16), wake: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Listen serves the simulator on addr ("127.0.0.1:0" picks a free port)
// until Close.
func (s *Sim) Listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("btcpaysim: serve", "error", err)
		}
	}()
	go func() { defer s.wg.Done(); s.sendLoop() }()
	if s.o.TickEvery > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t := time.NewTicker(s.o.TickEvery)
			defer t.Stop()
			for {
				select {
				case <-s.ctx.Done():
					return
				case <-t.C:
					s.Tick()
				}
			}
		}()
	}
	return nil
}

// Start runs a simulator on a loopback port for the duration of a test.
func Start(t TB, o Options) *Sim {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatalf("btcpaysim: %v", err)
	}
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatalf("btcpaysim: listen: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Close stops serving and sending webhooks.
func (s *Sim) Close() error {
	s.cancel()
	var err error
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = s.srv.Shutdown(ctx)
	}
	s.wg.Wait()
	return err
}

// URL is the simulator's base URL (BTCPAY_URL).
func (s *Sim) URL() string { return s.url }

// APIKey is the accepted API key (BTCPAY_API_KEY).
func (s *Sim) APIKey() string { return s.o.APIKey }

// StoreID is the store's id (BTCPAY_STORE_ID).
func (s *Sim) StoreID() string { return s.o.StoreID }

// Network is the Bitcoin network of the simulator's addresses.
func (s *Sim) Network() string { return s.o.Network }

// TronPool returns the USDT-TRON address pool.
func (s *Sim) TronPool() []string { return append([]string(nil), s.o.TronPool...) }

// SetPaymentMethods replaces the store's enabled payment methods (asset
// discovery follows them).
func (s *Sim) SetPaymentMethods(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methods = s.methods[:0]
	for _, id := range ids {
		s.methods = append(s.methods, btcpay.NormalizeMethodID(id))
	}
}

// PaymentMethods returns the store's enabled payment methods.
func (s *Sim) PaymentMethods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.methods...)
}

func (s *Sim) hasMethod(id string) bool {
	for _, m := range s.methods {
		if m == btcpay.NormalizeMethodID(id) {
			return true
		}
	}
	return false
}

// Handler returns the simulator's HTTP handler (the API and /_sim/).
func (s *Sim) Handler() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("GET /api/v1/server/info", s.serverInfo)
	api.HandleFunc("GET /api/v1/stores/{storeId}/payment-methods", s.store(s.storeMethods))
	api.HandleFunc("POST /api/v1/stores/{storeId}/invoices", s.store(s.createInvoice))
	api.HandleFunc("GET /api/v1/stores/{storeId}/invoices", s.store(s.listInvoices))
	api.HandleFunc("GET /api/v1/stores/{storeId}/invoices/{invoiceId}", s.store(s.getInvoice))
	api.HandleFunc("GET /api/v1/stores/{storeId}/invoices/{invoiceId}/payment-methods", s.store(s.invoicePayMethods))
	api.HandleFunc("POST /api/v1/stores/{storeId}/invoices/{invoiceId}/status", s.store(s.markInvoice))
	api.HandleFunc("POST /api/v1/stores/{storeId}/payouts", s.store(s.createPayout))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payouts", s.store(s.listPayouts))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payouts/{payoutId}", s.store(s.getPayout))
	api.HandleFunc("DELETE /api/v1/stores/{storeId}/payouts/{payoutId}", s.store(s.cancelPayout))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payment-methods/{paymentMethodId}/wallet", s.store(s.walletOverview))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payment-methods/{paymentMethodId}/wallet/feerate", s.store(s.walletFeeRate))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payment-methods/{paymentMethodId}/wallet/transactions", s.store(s.walletTransactions))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payment-methods/{paymentMethodId}/wallet/transactions/{transactionId}", s.store(s.walletTransaction))
	api.HandleFunc("GET /api/v1/stores/{storeId}/payment-methods/{paymentMethodId}/wallet/objects/{objectType}/{objectId}", s.store(s.walletObject))
	api.HandleFunc("GET /api/v1/stores/{storeId}/lightning/{cryptoCode}/balance", s.store(s.lightningBalance))
	api.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "Not found")
	})

	root := http.NewServeMux()
	for prefix, h := range s.o.Mounts {
		root.Handle(prefix, h)
	}
	root.Handle("/_sim/", s.controlHandler())
	root.Handle("/", s.apiMiddleware(api))
	return root
}

// store wraps a store-scoped handler: the path's store must be ours.
func (s *Sim) store(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("storeId") != s.o.StoreID {
			// BTCPay answers a key without rights on that store like this.
			writeJSON(w, http.StatusForbidden, map[string]string{"code": "missing-permission",
				"message": "Insufficient API Permissions. Please use an API key with permission: btcpay.store.canviewstoresettings"})
			return
		}
		h(w, r)
	}
}

// apiMiddleware applies time, the down and failure modes, and the API key.
func (s *Sim) apiMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.tickBeforeRequest()
		mode, delay := s.takeFailure()
		if delay > 0 {
			// Slow: the work is done after the delay even when the client
			// has given up meanwhile, as a busy server finishes what it
			// started; only the answer is lost then.
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return
			}
		}
		switch mode {
		case DownError:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("<html><body>503 Service Unavailable</body></html>"))
			return
		case DownDrop:
			dropConnection(w)
			return
		case DownHang:
			select {
			case <-r.Context().Done():
			case <-s.ctx.Done():
			}
			dropConnection(w)
			return
		}
		if r.Header.Get("Authorization") != "token "+s.o.APIKey {
			problem(w, http.StatusUnauthorized, "unauthenticated", "Authentication is required for accessing this endpoint")
			return
		}
		if mode == DownDropAfter {
			// Do the work, then lose the answer: the ambiguous case.
			next.ServeHTTP(discardWriter{h: http.Header{}}, r)
			dropConnection(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// DownMode is how the simulated server fails.
type DownMode string

// Down modes.
const (
	DownNone      DownMode = ""
	DownError     DownMode = "error"      // 503 with an HTML page, nothing done
	DownDrop      DownMode = "drop"       // connection closed before anything is done
	DownHang      DownMode = "hang"       // no answer until the client gives up, nothing done
	DownDropAfter DownMode = "drop-after" // the request takes effect, then the connection is closed
)

type downState struct {
	mode     DownMode // applies to every API request while set
	delay    time.Duration
	next     DownMode // applies to the next `count` requests
	nextLeft int
}

// GoDown makes every API request fail with mode until Up (the control API
// keeps working).
func (s *Sim) GoDown(mode DownMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down.mode = mode
}

// GoSlow makes every API request answer after delay, until Up: a
// processor that works but slowly (delay beyond the client's timeout: it
// does the work and the client never learns it).
func (s *Sim) GoSlow(delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down.delay = delay
}

// Up ends GoDown, GoSlow and FailNext.
func (s *Sim) Up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = downState{}
}

// FailNext makes the next n API requests fail with mode.
func (s *Sim) FailNext(n int, mode DownMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down.next, s.down.nextLeft = mode, n
}

func (s *Sim) takeFailure() (DownMode, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down.mode != DownNone {
		return s.down.mode, s.down.delay
	}
	if s.down.nextLeft > 0 {
		s.down.nextLeft--
		return s.down.next, s.down.delay
	}
	return DownNone, s.down.delay
}

func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// problem writes BTCPay's ProblemDetails body.
func problem(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

type fieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// invalid writes BTCPay's 422 validation body.
func invalid(w http.ResponseWriter, path, msg string) {
	writeJSON(w, http.StatusUnprocessableEntity, []fieldError{{Path: path, Message: msg}})
}

func (s *Sim) serverInfo(w http.ResponseWriter, _ *http.Request) {
	type syncStatus struct {
		PaymentMethodID string `json:"paymentMethodId"`
		NodeInformation any    `json:"nodeInformation"`
		ChainHeight     int64  `json:"chainHeight"`
		SyncHeight      *int64 `json:"syncHeight"`
		Available       bool   `json:"available"`
	}
	s.mu.Lock()
	h := s.wallet.height
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"version": s.o.Version, "onion": "", "fullySynched": true,
		"supportedPaymentMethods": []string{btcpay.MethodBTCChain, btcpay.MethodBTCLN, btcpay.MethodBTCLNURL, btcpay.MethodUSDTTron},
		"syncStatus": []syncStatus{{PaymentMethodID: btcpay.MethodBTCChain, ChainHeight: h, SyncHeight: &h, Available: true,
			NodeInformation: map[string]any{"headers": h, "blocks": h, "verificationProgress": 1.0}}},
	})
}

func (s *Sim) storeMethods(w http.ResponseWriter, r *http.Request) {
	onlyEnabled := r.URL.Query().Get("onlyEnabled") == "true"
	s.mu.Lock()
	defer s.mu.Unlock()
	type method struct {
		Enabled         bool   `json:"enabled"`
		PaymentMethodID string `json:"paymentMethodId"`
	}
	out := []method{}
	for _, m := range []string{btcpay.MethodBTCChain, btcpay.MethodBTCLN, btcpay.MethodUSDTTron} {
		// A disabled method still exists in the store's settings.
		if on := s.hasMethod(m); on || !onlyEnabled {
			out = append(out, method{Enabled: on, PaymentMethodID: m})
		}
	}
	for _, m := range s.methods {
		if m != btcpay.MethodBTCChain && m != btcpay.MethodBTCLN && m != btcpay.MethodUSDTTron {
			out = append(out, method{Enabled: true, PaymentMethodID: m})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
