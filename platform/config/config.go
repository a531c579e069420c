// Package config owns the service's settings: one typed Config, filled once
// from environment variables over an optional YAML file, and validated before
// any process starts.
//
// Every setting is a leaf field with four tags: mapstructure (its key in the
// YAML file), env (its environment variable), default, and doc. The loader
// binds and defaults every leaf from those tags, and Settings() lists them
// for the README table, so the list of settings lives in exactly one place.
package config

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is the whole configuration of every svc process.
type Config struct {
	Env       string    `mapstructure:"env" env:"SVC_ENV" default:"development" doc:"development or production; production refuses test-mode API keys and the simulator's defaults"`
	LogLevel  string    `mapstructure:"log_level" env:"LOG_LEVEL" default:"info" doc:"debug, info, warn or error"`
	HTTP      HTTP      `mapstructure:"http"`
	Database  Database  `mapstructure:"database"`
	APIKeys   APIKeys   `mapstructure:"api_keys"`
	Worker    Worker    `mapstructure:"worker"`
	Webhooks  Webhooks  `mapstructure:"webhooks"`
	BTCPay    BTCPay    `mapstructure:"btcpay"`
	Chain     Chain     `mapstructure:"chain"`
	Tron      Tron      `mapstructure:"tron"`
	Deposits  Deposits  `mapstructure:"deposits"`
	Payouts   Payouts   `mapstructure:"payouts"`
	Metrics   Metrics   `mapstructure:"metrics"`
	AdminUI   AdminUI   `mapstructure:"admin_ui"`
	Console   Console   `mapstructure:"console"`
	Ledger    Ledger    `mapstructure:"ledger"`
	Operators Operators `mapstructure:"operators"`
	Sandbox   Sandbox   `mapstructure:"sandbox"`
}

// Sandbox configures the test helpers (/v1/test_helpers/..., docs/sandbox.md):
// on a test-mode deployment whose processor is the simulator, they drive
// the simulator's control API and apply its new state at once.
type Sandbox struct {
	SimulatorURL string `mapstructure:"simulator_url" env:"SANDBOX_SIMULATOR_URL" default:"" doc:"base URL of the processor simulator whose control API (/_sim/) the test helpers under /v1/test_helpers drive; empty: BTCPAY_URL when GET BTCPAY_URL/_sim/ answers as the simulator; off: no helpers. The helpers answer only with API_KEY_MODE=test, else 404 as an unknown route; refused in production (docs/sandbox.md)"`
}

// SandboxOff is the SANDBOX_SIMULATOR_URL that turns the test helpers off.
const SandboxOff = "off"

// Operators configures how operators' signed actions are checked
// (modules/operator; docs/operations.md, "Operators").
type Operators struct {
	Signatures      string   `mapstructure:"signatures" env:"OPERATOR_SIGNATURES" default:"" doc:"off or required: required refuses every admin action that moves, releases or credits money or changes limits, keys or operators unless it carries an enrolled operator's signature (the Svc-Operator-Signature header; svc admin --key); off lets an unsigned request act as its admin API key (a signature sent is verified all the same, and four-eyes approval always needs two operators' signatures). Empty: required in production, off in development"`
	WebAuthnRPID    string   `mapstructure:"webauthn_rp_id" env:"OPERATOR_WEBAUTHN_RP_ID" default:"localhost" doc:"the WebAuthn relying party id operators' passkeys are scoped to (the console's host name)"`
	WebAuthnOrigins []string `mapstructure:"webauthn_origins" env:"OPERATOR_WEBAUTHN_ORIGINS" default:"" doc:"comma-separated origins (https://console.example.com) a passkey signature may come from; empty: https:// and http:// of the RP id, the latter outside production only, and the console's own origin (the RP id on CONSOLE_ADDR's port, https:// when the console serves HTTPS)"`
}

// SignaturesRequired reports whether signed actions refuse an unsigned
// request (OPERATOR_SIGNATURES, required by default in production).
func (c Config) SignaturesRequired() bool {
	if c.Operators.Signatures == "" {
		return c.Production()
	}
	return c.Operators.Signatures == "required"
}

// HTTP configures the API listener.
type HTTP struct {
	Port             int           `mapstructure:"port" env:"PORT" default:"8080" doc:"TCP port svc api listens on"`
	ListenHost       string        `mapstructure:"listen_host" env:"HTTP_LISTEN_HOST" default:"" doc:"address svc api listens on: empty for every interface (containers), 127.0.0.1 for this machine only (make run)"`
	BodyLimitBytes   int           `mapstructure:"body_limit_bytes" env:"HTTP_BODY_LIMIT_BYTES" default:"1048576" doc:"largest request body accepted, in bytes"`
	MaxConnections   int           `mapstructure:"max_connections" env:"HTTP_MAX_CONNECTIONS" default:"4096" doc:"most client connections svc api holds open at once: at the bound, idle keep-alive connections are closed to make room for a new client, and if none is idle it waits in the kernel's accept queue until one closes, so a flood of clients cannot exhaust file descriptors or memory (0: no bound)"`
	ShutdownTimeout  time.Duration `mapstructure:"shutdown_timeout" env:"SHUTDOWN_TIMEOUT" default:"15s" doc:"how long a SIGTERM waits for in-flight requests and jobs"`
	IngressRetention time.Duration `mapstructure:"ingress_retention" env:"INGRESS_RETENTION" default:"720h" doc:"how long processed processor webhook deliveries are kept (unprocessed ones are kept until processed)"`
	ReadyzCacheTTL   time.Duration `mapstructure:"readyz_cache_ttl" env:"READYZ_CACHE_TTL" default:"5s" doc:"how long /readyz reuses a component's result (it needs no key, so it must not call the processor and the TRON node at the caller's pace)"`
	IdempotencyTTL   time.Duration `mapstructure:"idempotency_ttl" env:"IDEMPOTENCY_RETENTION" default:"168h" doc:"how long idempotency records are kept (at least 7 days)"`
	TrustedProxies   []string      `mapstructure:"trusted_proxies" env:"TRUSTED_PROXIES" default:"" doc:"comma-separated CIDRs or addresses of the reverse proxies in front of svc api whose TRUSTED_PROXY_HEADER is believed for the client's address (an API key's allowed networks are checked against it): the header is walked from the right, skipping these proxies, and the first other address is the client's; empty: the header is ignored and the client is the TCP peer"`
	ProxyHeader      string        `mapstructure:"trusted_proxy_header" env:"TRUSTED_PROXY_HEADER" default:"X-Forwarded-For" doc:"the header the trusted proxies append the client's address to: X-Forwarded-For or Forwarded (RFC 7239, its for= parameters); the proxies must append to it, never pass on a client's copy as their own"`
}

// Database configures the PostgreSQL connection.
type Database struct {
	URL      string `mapstructure:"url" env:"DATABASE_URL" default:"" required:"true" doc:"PostgreSQL connection URL"`
	MaxConns int    `mapstructure:"max_conns" env:"DATABASE_MAX_CONNS" default:"20" doc:"size of each process's connection pool"`
	// MigrateURL is the schema owner's connection, for svc migrate only.
	MigrateURL string `mapstructure:"migrate_url" env:"MIGRATE_DATABASE_URL" default:"" doc:"PostgreSQL URL of the schema owner, used by svc migrate only (unset: DATABASE_URL); when its user differs from DATABASE_URL's, migrate grants that runtime role what the service needs and nothing more"`
	// ReadURL and ReadMaxLag route the reads where staleness is harmless
	// (docs/operations.md, "Reads from a replica").
	ReadURL    string        `mapstructure:"read_url" env:"DATABASE_READ_URL" default:"" doc:"PostgreSQL URL of a streaming standby that svc api reads user histories and lists from (read-only sessions, a pool of DATABASE_MAX_CONNS); balances, single resources and every read a money decision depends on stay on DATABASE_URL. Unset: everything reads DATABASE_URL (docs/operations.md, \"Reads from a replica\")"`
	ReadMaxLag time.Duration `mapstructure:"read_max_lag" env:"DATABASE_READ_MAX_LAG" default:"5s" doc:"with DATABASE_READ_URL: how far behind the primary the standby may be for lists to read it; beyond it, or when the standby is unreachable, they read the primary"`
}

// APIKeys configures the format of minted API keys.
type APIKeys struct {
	Prefix   string        `mapstructure:"prefix" env:"API_KEY_PREFIX" default:"svc" doc:"product prefix of API keys (lowercase letters and digits)"`
	Mode     string        `mapstructure:"mode" env:"API_KEY_MODE" default:"test" doc:"live or test: the middle part of newly minted keys; keys of the other mode do not authenticate, and no test key is minted where live keys exist"`
	CacheTTL time.Duration `mapstructure:"cache_ttl" env:"API_KEY_CACHE_TTL" default:"2s" doc:"how long svc api trusts a key it found active before reading it again (0: every request reads it); a revocation is seen at once by the process that made it and within this time by the others"`
}

// Worker configures svc worker.
type Worker struct {
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval" env:"WORKER_HEARTBEAT_INTERVAL" default:"30s" doc:"how often the worker writes its heartbeat"`
	StaleAfter        time.Duration `mapstructure:"stale_after" env:"WORKER_STALE_AFTER" default:"2m" doc:"age after which /readyz calls the worker heartbeat degraded"`
	Concurrency       int           `mapstructure:"concurrency" env:"WORKER_CONCURRENCY" default:"20" doc:"jobs worked at once per worker process"`
	DepositPollEvery  time.Duration `mapstructure:"deposit_poll_every" env:"DEPOSIT_POLL_INTERVAL" default:"2m" doc:"how often open deposits are reconciled against the processor"`
	DiscoveryEvery    time.Duration `mapstructure:"discovery_every" env:"DISCOVERY_INTERVAL" default:"10m" doc:"how often the processor's payment methods are re-read to enable or disable assets"`
	WalletScanEvery   time.Duration `mapstructure:"wallet_scan_every" env:"WALLET_SCAN_INTERVAL" default:"10m" doc:"how often BTC wallet receives are matched against deposit payments"`
}

// Webhooks configures outbound event delivery to the platform.
type Webhooks struct {
	URL    string `mapstructure:"url" env:"PLATFORM_WEBHOOK_URL" default:"" doc:"where events are POSTed; unset keeps them queued until it is set"`
	Secret string `mapstructure:"secret" env:"PLATFORM_WEBHOOK_SECRET" default:"" secret:"true" doc:"HMAC-SHA256 key for X-Service-Signature; required when PLATFORM_WEBHOOK_URL is set"`
	// PreviousSecret signs too during a rotation (a second v1).
	PreviousSecret string        `mapstructure:"previous_secret" env:"PLATFORM_WEBHOOK_SECRET_PREVIOUS" default:"" secret:"true" doc:"during a rotation, the secret being retired: every delivery is signed with it too (a second v1) until it is removed"`
	Timeout        time.Duration `mapstructure:"timeout" env:"PLATFORM_WEBHOOK_TIMEOUT" default:"10s" doc:"time limit of one delivery attempt"`
	// EndpointKey seals the signing secrets of the webhook endpoints
	// operators add (event.Sealer).
	EndpointKey string `mapstructure:"endpoint_key" env:"WEBHOOK_ENDPOINT_KEY" default:"" secret:"true" doc:"64 hex digits (32 bytes): the AES-256-GCM key that seals the webhook endpoints' signing secrets in the database; required in production to add endpoints, the same for svc api and svc worker"`
}

// WebhookURLProblem says what is wrong with u as a webhook URL (an
// endpoint's or PLATFORM_WEBHOOK_URL), "" when nothing: http:// or
// https://, and in production https:// (http:// only to a loopback
// address).
func WebhookURLProblem(u string, production bool) string {
	switch {
	case !httpURL(u):
		return "must be an http:// or https:// URL"
	case production && !secureURL(u):
		return "must be https:// in production (http:// only to a loopback address)"
	}
	return ""
}

// BTCPay configures the payment processor.
type BTCPay struct {
	URL           string        `mapstructure:"url" env:"BTCPAY_URL" default:"" doc:"base URL of the BTCPay Server (or the simulator)"`
	APIKey        string        `mapstructure:"api_key" env:"BTCPAY_API_KEY" default:"" secret:"true" doc:"Greenfield API key (sent as Authorization: token ...)"`
	StoreID       string        `mapstructure:"store_id" env:"BTCPAY_STORE_ID" default:"" doc:"the BTCPay store that holds invoices and payouts"`
	WebhookSecret string        `mapstructure:"webhook_secret" env:"PROCESSOR_WEBHOOK_SECRET" default:"" secret:"true" doc:"HMAC secret of the ingress webhook (Processor-Sig / BTCPay-Sig); separate from any API key"`
	Timeout       time.Duration `mapstructure:"timeout" env:"BTCPAY_TIMEOUT" default:"15s" doc:"time limit of one processor call"`
	SpeedPolicy   string        `mapstructure:"speed_policy" env:"BTCPAY_SPEED_POLICY" default:"MediumSpeed" doc:"invoice speedPolicy: HighSpeed, MediumSpeed, LowMediumSpeed or LowSpeed"`
}

// Chain configures which networks destinations and invoices belong to.
type Chain struct {
	Network          string `mapstructure:"network" env:"BITCOIN_NETWORK" default:"" required:"true" doc:"mainnet, testnet, signet or regtest: addresses and BOLT11 invoices of other networks are refused"`
	LightningEnabled bool   `mapstructure:"lightning_enabled" env:"LIGHTNING_ENABLED" default:"false" doc:"opt in to BTC_LN (also needs the store's BTC-LN payment method)"`
}

// Tron configures the TRON node API used to verify USDT transfers.
type Tron struct {
	URL               string        `mapstructure:"url" env:"TRONGRID_URL" default:"" doc:"TronGrid (or simulator) base URL; unset leaves tron_node out of /readyz"`
	APIKey            string        `mapstructure:"api_key" env:"TRONGRID_API_KEY" default:"" secret:"true" doc:"sent as TRON-PRO-API-KEY"`
	USDTContract      string        `mapstructure:"usdt_contract" env:"USDT_TRC20_CONTRACT" default:"TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t" doc:"the only token contract accepted for USDT"`
	HotWallet         string        `mapstructure:"hot_wallet" env:"TRON_HOT_WALLET" default:"" doc:"TRON address operators send USDT withdrawals from"`
	TRXAlertThreshold int64         `mapstructure:"trx_alert_threshold" env:"TRX_ALERT_THRESHOLD" default:"200" doc:"alert when the hot wallet's TRX (gas) balance falls below this many TRX"`
	Timeout           time.Duration `mapstructure:"timeout" env:"TRONGRID_TIMEOUT" default:"10s" doc:"time limit of one TronGrid call"`
}

// Deposits configures deposit creation and attribution.
type Deposits struct {
	ExpirationMinutes int           `mapstructure:"expiration_minutes" env:"DEPOSIT_EXPIRATION_MINUTES" default:"60" doc:"invoice expiry for BTC and BTC_LN (USDT is always 60)"`
	MonitoringMinutes int           `mapstructure:"monitoring_minutes" env:"DEPOSIT_MONITORING_MINUTES" default:"1440" doc:"how long the processor keeps watching an expired invoice"`
	USDTPool          []string      `mapstructure:"usdt_pool" env:"USDT_POOL_ADDRESSES" default:"" doc:"comma-separated TRON addresses of the processor's USDT pool"`
	USDTPoolGrace     time.Duration `mapstructure:"usdt_pool_grace" env:"USDT_POOL_GRACE" default:"30m" doc:"time after a USDT invoice's expiry before its address returns to the pool"`
	USDTTolerancePPM  int64         `mapstructure:"usdt_tolerance_ppm" env:"USDT_AMOUNT_TOLERANCE_PPM" default:"10000" doc:"a USDT payment further than this (parts per million of amount_expected) from it goes to review"`
}

// Payouts configures withdrawals.
type Payouts struct {
	LNPayoutTimeoutSeconds int           `mapstructure:"ln_payout_timeout_seconds" env:"LN_PAYOUT_TIMEOUT_SECONDS" default:"3600" doc:"deadline for a Lightning payout before it is treated as stuck"`
	AssumedTxVBytes        int           `mapstructure:"assumed_tx_vbytes" env:"BTC_ASSUMED_TX_VBYTES" default:"141" doc:"assumed BTC payout size: fee = live fee rate x this"`
	FeeMode                string        `mapstructure:"fee_mode" env:"WITHDRAWAL_FEE_MODE" default:"deduct" doc:"deduct (the user receives the gross minus the fee) or absorb (the user receives the whole gross; the service pays the fee)"`
	FeeRateTTL             time.Duration `mapstructure:"fee_rate_ttl" env:"BTC_FEE_RATE_TTL" default:"30s" doc:"how long a BTC fee-rate estimate read from the processor is reused for new withdrawals"`
	PollInterval           time.Duration `mapstructure:"poll_interval" env:"PAYOUT_POLL_INTERVAL" default:"10s" doc:"how often the worker submits approved BTC and BTC_LN withdrawals and reads their open payouts (webhooks act at once)"`
}

// Metrics configures the metrics listener of svc api and svc worker.
type Metrics struct {
	Addr string `mapstructure:"addr" env:"METRICS_ADDR" default:"" doc:"host:port of the metrics listener of svc api and svc worker (Prometheus /metrics and net/http/pprof /debug/pprof/, never on PORT); empty turns it off. It has no authentication: bind it to a private address (127.0.0.1:9090, or the pod's address behind a network policy), and give the api and the worker different ports when they share a host. In production it must be a loopback address unless METRICS_ALLOW_NON_LOOPBACK is true"`
	// AllowNonLoopback lets a production process put the listener on an
	// address other networks can reach.
	AllowNonLoopback bool `mapstructure:"allow_non_loopback" env:"METRICS_ALLOW_NON_LOOPBACK" default:"false" doc:"true lets METRICS_ADDR be a non-loopback address (every interface, a pod's or a private address) in production, where it is refused otherwise: set it only where a firewall or a network policy keeps everyone but the scraper away, since the listener has no authentication"`
}

// AdminUI configures svc admin ui, River's web UI for operators.
type AdminUI struct {
	Addr string `mapstructure:"addr" env:"ADMIN_UI_ADDR" default:"127.0.0.1:8092" doc:"host:port svc admin ui listens on (River's web UI: jobs and queues, for operators, behind an admin API key as the HTTP basic password); loopback by default. It serves plain HTTP: keep it on loopback or a private address, behind TLS across a network. In production it must be a loopback address unless ADMIN_UI_ALLOW_NON_LOOPBACK is true"`
	// AllowNonLoopback lets a production svc admin ui listen on an
	// address other networks can reach.
	AllowNonLoopback bool `mapstructure:"allow_non_loopback" env:"ADMIN_UI_ALLOW_NON_LOOPBACK" default:"false" doc:"true lets ADMIN_UI_ADDR (or svc admin ui --addr) be a non-loopback address in production, where it is refused otherwise: set it only behind TLS on a private network, since the admin key travels in every request"`
}

// Console configures svc admin console, the operators' web console
// (modules/console; docs/operations.md, "Console").
type Console struct {
	Addr        string        `mapstructure:"addr" env:"CONSOLE_ADDR" default:"127.0.0.1:8093" doc:"host:port svc admin console listens on (the operators' web console, signed in with an enrolled operator's passkey); loopback by default. In production a non-loopback address is refused unless CONSOLE_TLS_CERT and CONSOLE_TLS_KEY are set"`
	TLSCert     string        `mapstructure:"tls_cert" env:"CONSOLE_TLS_CERT" default:"" doc:"PEM certificate (chain) file the console serves HTTPS with; set together with CONSOLE_TLS_KEY. Unset: plain HTTP"`
	TLSKey      string        `mapstructure:"tls_key" env:"CONSOLE_TLS_KEY" default:"" doc:"PEM private key file of CONSOLE_TLS_CERT"`
	IdleTimeout time.Duration `mapstructure:"idle_timeout" env:"CONSOLE_IDLE_TIMEOUT" default:"15m" doc:"a console session unused this long is signed out (from 1s to 1h)"`
}

// TLS reports whether the console serves HTTPS (CONSOLE_TLS_CERT and
// CONSOLE_TLS_KEY set).
func (c Console) TLS() bool { return c.TLSCert != "" && c.TLSKey != "" }

// ConsoleSecureCookies reports whether the console's cookies are Secure:
// in production, and whenever it serves HTTPS.
func (c Config) ConsoleSecureCookies() bool { return c.Production() || c.Console.TLS() }

// Ledger configures the ledger's tamper-evident checkpoints
// (docs/checkpoints.md) and how often the hourly reconciliation checks
// the whole ledger (docs/reconciliation.md).
type Ledger struct {
	CheckpointInterval   time.Duration `mapstructure:"checkpoint_interval" env:"LEDGER_CHECKPOINT_INTERVAL" default:"10m" doc:"how often the worker seals the ledger entries committed since the last checkpoint (a Merkle root chained to the previous checkpoint; docs/checkpoints.md)"`
	FullCheckInterval    time.Duration `mapstructure:"full_check_interval" env:"LEDGER_FULL_CHECK_INTERVAL" default:"168h" doc:"how long the hourly reconciliation goes on with the incremental ledger check before it checks the whole ledger again (every posting; about 14 s at ten million postings): the full check is what finds a row changed below a check's boundary with the triggers off. 0 leaves it to operators (svc admin reconciliation --full)"`
	CheckpointSigningKey string        `mapstructure:"checkpoint_signing_key" env:"LEDGER_CHECKPOINT_SIGNING_KEY" default:"" secret:"true" doc:"Ed25519 key that signs each checkpoint's hash: the 32-byte seed or the 64-byte private key (seed then public key), in hex or standard base64; empty leaves checkpoints unsigned. The public key is served at GET /v1/admin/ledger/checkpoints/key"`
}

// CheckpointKey parses LEDGER_CHECKPOINT_SIGNING_KEY: nil when it is
// empty. Hex is tried first (64 or 128 hex digits), then standard base64
// with or without padding; the decoded key is a 32-byte seed or a 64-byte
// private key whose second half must be the seed's public key.
func (l Ledger) CheckpointKey() (ed25519.PrivateKey, error) {
	s := strings.TrimSpace(l.CheckpointSigningKey)
	if s == "" {
		return nil, nil
	}
	var raw []byte
	if b, err := hex.DecodeString(s); err == nil && (len(b) == ed25519.SeedSize || len(b) == ed25519.PrivateKeySize) {
		raw = b
	} else if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		raw = b
	} else if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		raw = b
	} else {
		return nil, fmt.Errorf("must be hex or standard base64")
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		k := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !bytes.Equal(k[ed25519.SeedSize:], raw[ed25519.SeedSize:]) {
			return nil, fmt.Errorf("is a 64-byte key whose second half is not the public key of its first")
		}
		return k, nil
	}
	return nil, fmt.Errorf("must decode to 32 bytes (an Ed25519 seed) or 64 bytes (a private key), not %d", len(raw))
}

// Production reports whether the deployment runs with real money.
func (c Config) Production() bool { return c.Env == "production" }

// Validate checks every setting that has a rule, naming the setting.
func (c Config) Validate() error {
	var errs []string
	add := func(env, msg string) { errs = append(errs, env+": "+msg) }

	if !slices.Contains([]string{"development", "production"}, c.Env) {
		add("SVC_ENV", "must be development or production")
	}
	if !slices.Contains([]string{"", "off", "required"}, c.Operators.Signatures) {
		add("OPERATOR_SIGNATURES", "must be off or required")
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		add("LOG_LEVEL", "must be debug, info, warn or error")
	}
	if c.HTTP.Port < 1 || c.HTTP.Port > 65535 {
		add("PORT", "must be a port number from 1 to 65535")
	}
	if h := c.HTTP.ListenHost; h != "" && h != "localhost" && net.ParseIP(h) == nil {
		add("HTTP_LISTEN_HOST", "must be empty, localhost or an IP address")
	}
	if c.HTTP.BodyLimitBytes < 1024 {
		add("HTTP_BODY_LIMIT_BYTES", "must be at least 1024")
	}
	if c.HTTP.IngressRetention < 24*time.Hour {
		add("INGRESS_RETENTION", "must be at least 24h")
	}
	if c.HTTP.ReadyzCacheTTL < 0 || c.HTTP.ReadyzCacheTTL > 5*time.Minute {
		add("READYZ_CACHE_TTL", "must be from 0s to 5m")
	}
	for _, p := range c.HTTP.TrustedProxies {
		if _, err := netip.ParsePrefix(strings.TrimSpace(p)); err != nil {
			if _, err := netip.ParseAddr(strings.TrimSpace(p)); err != nil {
				add("TRUSTED_PROXIES", fmt.Sprintf("%q is not a CIDR or an IP address", p))
			}
		}
	}
	if !strings.EqualFold(c.HTTP.ProxyHeader, "X-Forwarded-For") && !strings.EqualFold(c.HTTP.ProxyHeader, "Forwarded") {
		add("TRUSTED_PROXY_HEADER", "must be X-Forwarded-For or Forwarded")
	}
	if c.HTTP.IdempotencyTTL < 7*24*time.Hour {
		add("IDEMPOTENCY_RETENTION", "must be at least 168h (7 days)")
	}
	if c.Database.URL != "" {
		if u, err := url.Parse(c.Database.URL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			add("DATABASE_URL", "must be a postgres:// or postgresql:// URL")
		}
	}
	if c.Database.MigrateURL != "" {
		if u, err := url.Parse(c.Database.MigrateURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			add("MIGRATE_DATABASE_URL", "must be a postgres:// or postgresql:// URL")
		}
	}
	if c.Database.ReadURL != "" {
		if u, err := url.Parse(c.Database.ReadURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			add("DATABASE_READ_URL", "must be a postgres:// or postgresql:// URL")
		}
	}
	if c.Database.ReadMaxLag < time.Second || c.Database.ReadMaxLag > time.Hour {
		add("DATABASE_READ_MAX_LAG", "must be from 1s to 1h")
	}
	if c.Database.MaxConns < 2 {
		add("DATABASE_MAX_CONNS", "must be at least 2")
	}
	if !validPrefix(c.APIKeys.Prefix) {
		add("API_KEY_PREFIX", "must be 2 to 16 lowercase letters or digits")
	}
	if c.APIKeys.Mode != "live" && c.APIKeys.Mode != "test" {
		add("API_KEY_MODE", "must be live or test")
	}
	if c.Worker.HeartbeatInterval <= 0 || c.Worker.StaleAfter <= c.Worker.HeartbeatInterval {
		add("WORKER_STALE_AFTER", "must be longer than WORKER_HEARTBEAT_INTERVAL")
	}
	if c.Worker.Concurrency < 1 {
		add("WORKER_CONCURRENCY", "must be at least 1")
	}
	for env, d := range map[string]time.Duration{"DEPOSIT_POLL_INTERVAL": c.Worker.DepositPollEvery, "DISCOVERY_INTERVAL": c.Worker.DiscoveryEvery, "WALLET_SCAN_INTERVAL": c.Worker.WalletScanEvery} {
		if d < time.Second {
			add(env, "must be at least 1s")
		}
	}
	if c.Webhooks.URL != "" {
		if !httpURL(c.Webhooks.URL) {
			add("PLATFORM_WEBHOOK_URL", "must be an http:// or https:// URL")
		}
		if c.Webhooks.Secret == "" {
			add("PLATFORM_WEBHOOK_SECRET", "is required when PLATFORM_WEBHOOK_URL is set")
		}
	}
	if k := c.Webhooks.EndpointKey; k != "" {
		if b, err := hex.DecodeString(k); err != nil || len(b) != 32 {
			add("WEBHOOK_ENDPOINT_KEY", "must be 64 hex digits (a 32-byte key)")
		}
	}
	if c.Webhooks.PreviousSecret != "" && c.Webhooks.PreviousSecret == c.Webhooks.Secret {
		add("PLATFORM_WEBHOOK_SECRET_PREVIOUS", "must differ from PLATFORM_WEBHOOK_SECRET (it is the secret being retired)")
	}
	if c.Webhooks.Timeout <= 0 || c.Webhooks.Timeout > time.Minute {
		// A delivery job lasts this plus a minute, within the longest job
		// timeout the worker's rescue of dead workers' jobs is set from.
		add("PLATFORM_WEBHOOK_TIMEOUT", "must be positive and at most 1m")
	}
	if c.BTCPay.URL != "" && !httpURL(c.BTCPay.URL) {
		add("BTCPAY_URL", "must be an http:// or https:// URL")
	}
	if c.BTCPay.URL != "" {
		if c.BTCPay.APIKey == "" {
			add("BTCPAY_API_KEY", "is required when BTCPAY_URL is set")
		}
		if c.BTCPay.StoreID == "" {
			add("BTCPAY_STORE_ID", "is required when BTCPAY_URL is set")
		}
		if c.BTCPay.WebhookSecret == "" {
			add("PROCESSOR_WEBHOOK_SECRET", "is required when BTCPAY_URL is set")
		}
	}
	if !slices.Contains([]string{"HighSpeed", "MediumSpeed", "LowMediumSpeed", "LowSpeed"}, c.BTCPay.SpeedPolicy) {
		add("BTCPAY_SPEED_POLICY", "must be HighSpeed, MediumSpeed, LowMediumSpeed or LowSpeed")
	}
	if c.BTCPay.Timeout <= 0 {
		add("BTCPAY_TIMEOUT", "must be positive")
	}
	if c.Chain.Network != "" && !slices.Contains([]string{"mainnet", "testnet", "signet", "regtest"}, c.Chain.Network) {
		add("BITCOIN_NETWORK", "must be mainnet, testnet, signet or regtest")
	}
	if c.Tron.URL != "" && !httpURL(c.Tron.URL) {
		add("TRONGRID_URL", "must be an http:// or https:// URL")
	}
	if c.Tron.TRXAlertThreshold < 0 {
		add("TRX_ALERT_THRESHOLD", "must not be negative")
	}
	if c.Deposits.ExpirationMinutes < 1 {
		add("DEPOSIT_EXPIRATION_MINUTES", "must be at least 1")
	}
	if c.Deposits.MonitoringMinutes < 0 {
		add("DEPOSIT_MONITORING_MINUTES", "must not be negative")
	}
	if c.Deposits.USDTPoolGrace < 0 {
		add("USDT_POOL_GRACE", "must not be negative")
	}
	if c.Deposits.USDTTolerancePPM < 0 || c.Deposits.USDTTolerancePPM > 1_000_000 {
		add("USDT_AMOUNT_TOLERANCE_PPM", "must be from 0 to 1000000")
	}
	if c.Payouts.LNPayoutTimeoutSeconds < 60 {
		add("LN_PAYOUT_TIMEOUT_SECONDS", "must be at least 60")
	}
	if c.Payouts.FeeMode != "deduct" && c.Payouts.FeeMode != "absorb" {
		add("WITHDRAWAL_FEE_MODE", "must be deduct or absorb")
	}
	if c.Payouts.FeeRateTTL < 0 || c.Payouts.FeeRateTTL > 10*time.Minute {
		add("BTC_FEE_RATE_TTL", "must be from 0s to 10m")
	}
	if c.Payouts.PollInterval < time.Second || c.Payouts.PollInterval > time.Hour {
		add("PAYOUT_POLL_INTERVAL", "must be between 1s and 1h")
	}
	if a := c.Metrics.Addr; a != "" {
		if host, port, err := net.SplitHostPort(a); err != nil {
			add("METRICS_ADDR", "must be host:port (127.0.0.1:9090, or :9090 for every interface)")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			add("METRICS_ADDR", "must end with a port number from 0 to 65535")
		} else if c.Production() && !c.Metrics.AllowNonLoopback && !loopbackHost(host) {
			add("METRICS_ADDR", "must be a loopback address (127.0.0.1:9090) in production: the listener has no authentication; set METRICS_ALLOW_NON_LOOPBACK=true if a firewall or network policy guards "+a)
		}
	}
	if a := c.AdminUI.Addr; a != "" {
		if host, port, err := net.SplitHostPort(a); err != nil {
			add("ADMIN_UI_ADDR", "must be host:port (127.0.0.1:8092)")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			add("ADMIN_UI_ADDR", "must end with a port number from 0 to 65535")
		} else if c.Production() && !c.AdminUI.AllowNonLoopback && !loopbackHost(host) {
			add("ADMIN_UI_ADDR", "must be a loopback address (127.0.0.1:8092) in production: it serves plain HTTP and the admin key travels in every request; set ADMIN_UI_ALLOW_NON_LOOPBACK=true if TLS on a private network guards "+a)
		}
	}
	if a := c.Console.Addr; a != "" {
		if host, port, err := net.SplitHostPort(a); err != nil {
			add("CONSOLE_ADDR", "must be host:port (127.0.0.1:8093)")
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			add("CONSOLE_ADDR", "must end with a port number from 0 to 65535")
		} else if c.Production() && !c.Console.TLS() && !loopbackHost(host) {
			add("CONSOLE_ADDR", "must be a loopback address (127.0.0.1:8093) in production unless the console serves HTTPS: set CONSOLE_TLS_CERT and CONSOLE_TLS_KEY to listen on "+a)
		}
	} else {
		add("CONSOLE_ADDR", "must be host:port (127.0.0.1:8093)")
	}
	if (c.Console.TLSCert == "") != (c.Console.TLSKey == "") {
		add("CONSOLE_TLS_CERT", "and CONSOLE_TLS_KEY are set together or not at all")
	}
	if c.Console.IdleTimeout < time.Second || c.Console.IdleTimeout > time.Hour {
		add("CONSOLE_IDLE_TIMEOUT", "must be from 1s to 1h")
	}
	if c.Ledger.CheckpointInterval < time.Second {
		add("LEDGER_CHECKPOINT_INTERVAL", "must be at least 1s")
	}
	if c.Ledger.FullCheckInterval < 0 {
		add("LEDGER_FULL_CHECK_INTERVAL", "must be 0 (off) or positive")
	}
	if _, err := c.Ledger.CheckpointKey(); err != nil {
		add("LEDGER_CHECKPOINT_SIGNING_KEY", err.Error()) // never the key itself
	}
	if c.Payouts.AssumedTxVBytes < 50 {
		add("BTC_ASSUMED_TX_VBYTES", "must be at least 50")
	}
	if u := c.Sandbox.SimulatorURL; u != "" && u != SandboxOff {
		if !httpURL(u) {
			add("SANDBOX_SIMULATOR_URL", "must be off or an http:// or https:// URL")
		}
		if c.Production() {
			add("SANDBOX_SIMULATOR_URL", "must be empty or off in production: the test helpers drive a simulated processor")
		}
	}
	if c.Production() && c.APIKeys.Mode != "live" {
		add("API_KEY_MODE", "must be live when SVC_ENV is production")
	}
	if c.Production() {
		// The local simulator's well-known values must never guard real money.
		for env, v := range map[string]string{"BTCPAY_API_KEY": c.BTCPay.APIKey, "PROCESSOR_WEBHOOK_SECRET": c.BTCPay.WebhookSecret,
			"PLATFORM_WEBHOOK_SECRET": c.Webhooks.Secret, "PLATFORM_WEBHOOK_SECRET_PREVIOUS": c.Webhooks.PreviousSecret} {
			if _, dev := devSecrets[v]; dev {
				add(env, "is the local run's value; production needs its own secret")
			}
		}
		if c.Webhooks.PreviousSecret != "" && len(c.Webhooks.PreviousSecret) < 16 {
			add("PLATFORM_WEBHOOK_SECRET_PREVIOUS", "must be at least 16 characters in production")
		}
		if c.Webhooks.Secret != "" && len(c.Webhooks.Secret) < 16 {
			add("PLATFORM_WEBHOOK_SECRET", "must be at least 16 characters in production")
		}
		if c.BTCPay.URL != "" && len(c.BTCPay.WebhookSecret) < 16 {
			add("PROCESSOR_WEBHOOK_SECRET", "must be at least 16 characters in production")
		}
		// Keys and signed payloads travel on these: https, except to this
		// machine itself.
		for env, u := range map[string]string{"BTCPAY_URL": c.BTCPay.URL, "TRONGRID_URL": c.Tron.URL, "PLATFORM_WEBHOOK_URL": c.Webhooks.URL} {
			if u != "" && !secureURL(u) {
				add(env, "must be https:// in production (http:// only to a loopback address)")
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// devSecrets are the values make run and the simulator use.
var devSecrets = map[string]struct{}{"simulator-api-key": {}, "local-webhook-secret": {}, "local-platform-secret": {}}

// secureURL reports an https URL, or an http one to a loopback address.
func secureURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	host := u.Hostname()
	if host == "localhost" {
		return u.Scheme == "http"
	}
	ip := net.ParseIP(host)
	return u.Scheme == "http" && ip != nil && ip.IsLoopback()
}

// loopbackHost reports a listener host that only this machine reaches:
// localhost or a loopback IP. An empty host is every interface.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validPrefix(p string) bool {
	if len(p) < 2 || len(p) > 16 {
		return false
	}
	for _, r := range p {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// ListenAddr is the address svc api listens on.
func (h HTTP) ListenAddr() string { return net.JoinHostPort(h.ListenHost, strconv.Itoa(h.Port)) }
