package config

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func baseEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@localhost:5432/db")
	t.Setenv("BITCOIN_NETWORK", "regtest")
}

func TestLoadDefaultsAndEnvironment(t *testing.T) {
	baseEnv(t)
	t.Setenv("PORT", "9090")
	t.Setenv("USDT_POOL_ADDRESSES", "TA, TB ,,TC")
	t.Setenv("LN_PAYOUT_TIMEOUT_SECONDS", "600")
	t.Setenv("TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7")
	cfg, err := load("")
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "192.0.2.7"}, cfg.HTTP.TrustedProxies)
	require.Equal(t, "X-Forwarded-For", cfg.HTTP.ProxyHeader)
	require.Equal(t, 9090, cfg.HTTP.Port)
	require.Equal(t, []string{"TA", "TB", "TC"}, cfg.Deposits.USDTPool)
	require.Equal(t, 600, cfg.Payouts.LNPayoutTimeoutSeconds)
	require.Equal(t, int64(200), cfg.Tron.TRXAlertThreshold)
	require.Equal(t, 2*time.Minute, cfg.Worker.DepositPollEvery)
	require.Equal(t, "svc", cfg.APIKeys.Prefix)
}

func TestEnvironmentOverridesFile(t *testing.T) {
	baseEnv(t)
	f := filepath.Join(t.TempDir(), "svc.yaml")
	require.NoError(t, os.WriteFile(f, []byte("http:\n  port: 7000\nlog_level: debug\nchain:\n  lightning_enabled: true\n"), 0o600))
	t.Setenv("PORT", "7001")
	cfg, err := load(f)
	require.NoError(t, err)
	require.Equal(t, 7001, cfg.HTTP.Port, "environment wins")
	require.Equal(t, "debug", cfg.LogLevel, "file beats default")
	require.True(t, cfg.Chain.LightningEnabled)
}

func TestBadSettingsAreNamed(t *testing.T) {
	for _, tc := range []struct {
		env, value, named string
	}{
		{"DATABASE_URL", "", "DATABASE_URL"},
		{"DATABASE_URL", "mysql://x", "DATABASE_URL"},
		{"BITCOIN_NETWORK", "", "BITCOIN_NETWORK"},
		{"BITCOIN_NETWORK", "moonnet", "BITCOIN_NETWORK"},
		{"PORT", "eighty", "PORT"},
		{"PORT", "70000", "PORT"},
		{"HTTP_LISTEN_HOST", "every interface", "HTTP_LISTEN_HOST"},
		{"WORKER_STALE_AFTER", "1s", "WORKER_STALE_AFTER"},
		{"SHUTDOWN_TIMEOUT", "soon", "SHUTDOWN_TIMEOUT"},
		{"LIGHTNING_ENABLED", "maybe", "LIGHTNING_ENABLED"},
		{"PLATFORM_WEBHOOK_URL", "https://platform.example/hooks", "PLATFORM_WEBHOOK_SECRET"},
		{"PLATFORM_WEBHOOK_URL", "ftp://x", "PLATFORM_WEBHOOK_URL"},
		{"BTCPAY_API_KEY", "", "BTCPAY_API_KEY"},
		{"TRX_ALERT_THRESHOLD", "-1", "TRX_ALERT_THRESHOLD"},
		{"USDT_AMOUNT_TOLERANCE_PPM", "2000000", "USDT_AMOUNT_TOLERANCE_PPM"},
		{"API_KEY_PREFIX", "Bad_Prefix", "API_KEY_PREFIX"},
		{"SVC_ENV", "production", "API_KEY_MODE"},
		{"SVC_ENV", "production", "PROCESSOR_WEBHOOK_SECRET"},
		{"PLATFORM_WEBHOOK_TIMEOUT", "5m", "PLATFORM_WEBHOOK_TIMEOUT"},
		{"PAYOUT_POLL_INTERVAL", "100ms", "PAYOUT_POLL_INTERVAL"},
		{"METRICS_ADDR", "9090", "METRICS_ADDR"},
		{"METRICS_ADDR", "127.0.0.1:metrics", "METRICS_ADDR"},
		{"LEDGER_CHECKPOINT_INTERVAL", "10ms", "LEDGER_CHECKPOINT_INTERVAL"},
		{"LEDGER_FULL_CHECK_INTERVAL", "-1h", "LEDGER_FULL_CHECK_INTERVAL"},
		{"LEDGER_CHECKPOINT_SIGNING_KEY", "not a key", "LEDGER_CHECKPOINT_SIGNING_KEY"},
		{"LEDGER_CHECKPOINT_SIGNING_KEY", "00112233", "LEDGER_CHECKPOINT_SIGNING_KEY"},
		{"TRUSTED_PROXIES", "10.0.0.0/8,proxy.internal", "TRUSTED_PROXIES"},
		{"TRUSTED_PROXY_HEADER", "X-Real-IP", "TRUSTED_PROXY_HEADER"},
	} {
		t.Run(tc.env+"="+tc.value+"/"+tc.named, func(t *testing.T) {
			baseEnv(t)
			t.Setenv("BTCPAY_URL", "https://btcpay.example")
			t.Setenv("BTCPAY_API_KEY", "k")
			t.Setenv("BTCPAY_STORE_ID", "s")
			t.Setenv("PROCESSOR_WEBHOOK_SECRET", "local-webhook-secret")
			t.Setenv(tc.env, tc.value)
			_, err := load("")
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.named)
		})
	}
}

func TestMissingFileIsNamed(t *testing.T) {
	baseEnv(t)
	_, err := load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorContains(t, err, FileEnv)
}

func TestSettingsAreDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings() {
		require.NotEmpty(t, s.Env, s.Key)
		require.NotEmpty(t, s.Doc, s.Env)
		require.False(t, seen[s.Env], "duplicate %s", s.Env)
		seen[s.Env] = true
	}
	for _, named := range []string{"PLATFORM_WEBHOOK_URL", "LN_PAYOUT_TIMEOUT_SECONDS", "TRX_ALERT_THRESHOLD", "DATABASE_URL", "PORT"} {
		require.True(t, seen[named], "the SPEC's %s must keep its name", named)
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for env := range seen {
		require.Contains(t, string(readme), "`"+env+"`", "README's configuration table lists %s", env)
	}
}

// TestMetricsListenerIsOffByDefault: METRICS_ADDR is empty unless set,
// and takes host:port with or without a host.
func TestMetricsListenerIsOffByDefault(t *testing.T) {
	baseEnv(t)
	cfg, err := load("")
	require.NoError(t, err)
	require.Empty(t, cfg.Metrics.Addr)
	for _, addr := range []string{"127.0.0.1:9090", ":9091", "[::1]:9090"} {
		t.Setenv("METRICS_ADDR", addr)
		cfg, err := load("")
		require.NoError(t, err, addr)
		require.Equal(t, addr, cfg.Metrics.Addr)
	}
}

func TestDefaultsAreTheTagDefaults(t *testing.T) {
	d := Defaults()
	require.Equal(t, 8080, d.HTTP.Port)
	require.Equal(t, 2*time.Minute, d.Worker.DepositPollEvery)
	require.Equal(t, int64(200), d.Tron.TRXAlertThreshold)
	require.Equal(t, "MediumSpeed", d.BTCPay.SpeedPolicy)
	require.Empty(t, d.Database.URL)
	require.Empty(t, d.Deposits.USDTPool)
}

// TestLocalRunListensOnLoopback: make run's configuration listens on this
// machine only (it prints an admin key); without it, every interface.
func TestLocalRunListensOnLoopback(t *testing.T) {
	baseEnv(t)
	cfg, err := load("../../configs/local.yaml")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", cfg.HTTP.ListenAddr())
	cfg, err = load("")
	require.NoError(t, err)
	require.Equal(t, ":8080", cfg.HTTP.ListenAddr())
}

// productionEnv is a valid production configuration.
var productionEnv = map[string]string{
	"SVC_ENV": "production", "API_KEY_MODE": "live",
	"BTCPAY_URL": "https://btcpay.example", "BTCPAY_API_KEY": "a-real-api-key", "BTCPAY_STORE_ID": "s",
	"PROCESSOR_WEBHOOK_SECRET": "0123456789abcdef-ingress",
	"TRONGRID_URL":             "https://api.trongrid.io",
	"PLATFORM_WEBHOOK_URL":     "https://platform.example/hooks", "PLATFORM_WEBHOOK_SECRET": "0123456789abcdef-platform",
}

// loadProduction loads productionEnv with over set on top of it.
func loadProduction(t *testing.T, over map[string]string) error {
	baseEnv(t)
	for k, v := range productionEnv {
		t.Setenv(k, v)
	}
	for k, v := range over {
		t.Setenv(k, v)
	}
	_, err := load("")
	return err
}

// TestProductionKeepsOperatorListenersOnLoopback: in production the
// metrics listener (no authentication) and the River UI (plain HTTP, the
// admin key in every request) take a loopback address only, unless their
// own setting allows another; in development any address goes.
func TestProductionKeepsOperatorListenersOnLoopback(t *testing.T) {
	for _, l := range []struct{ env, allow string }{
		{"METRICS_ADDR", "METRICS_ALLOW_NON_LOOPBACK"},
		{"ADMIN_UI_ADDR", "ADMIN_UI_ALLOW_NON_LOOPBACK"},
	} {
		t.Run(l.env, func(t *testing.T) { refusesNonLoopback(t, l.env, l.allow) })
	}
}

// TestProductionConsoleNeedsTLSOffLoopback: in production the console
// takes a non-loopback address only with CONSOLE_TLS_CERT and
// CONSOLE_TLS_KEY; in development any address goes.
func TestProductionConsoleNeedsTLSOffLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8093", "[::1]:8093", "localhost:8093"} {
		require.NoError(t, loadProduction(t, map[string]string{"CONSOLE_ADDR": addr}), addr)
	}
	for _, addr := range []string{":8093", "0.0.0.0:8093", "10.0.0.5:8093", "console.internal:8093"} {
		err := loadProduction(t, map[string]string{"CONSOLE_ADDR": addr, "CONSOLE_TLS_CERT": "", "CONSOLE_TLS_KEY": ""})
		require.Error(t, err, addr)
		require.Contains(t, err.Error(), "CONSOLE_ADDR: must be a loopback address")
		require.NoError(t, loadProduction(t, map[string]string{"CONSOLE_ADDR": addr, "CONSOLE_TLS_CERT": "c.pem", "CONSOLE_TLS_KEY": "k.pem"}), "%s with TLS", addr)
		err = loadProduction(t, map[string]string{"CONSOLE_ADDR": addr, "CONSOLE_TLS_CERT": "c.pem", "CONSOLE_TLS_KEY": ""})
		require.Error(t, err, "%s with a certificate and no key", addr)
		require.Contains(t, err.Error(), "CONSOLE_TLS_CERT: and CONSOLE_TLS_KEY are set together")
	}
	baseEnv(t)
	for k, v := range map[string]string{"SVC_ENV": "development", "CONSOLE_ADDR": "0.0.0.0:8093", "CONSOLE_TLS_CERT": "", "CONSOLE_TLS_KEY": ""} {
		t.Setenv(k, v)
	}
	_, err := load("")
	require.NoError(t, err, "development takes any address")
}

// TestConsoleSecureCookies: the console's cookies are Secure in
// production, and over HTTPS in development too.
func TestConsoleSecureCookies(t *testing.T) {
	c := Config{Env: "development"}
	require.False(t, c.ConsoleSecureCookies())
	c.Console.TLSCert, c.Console.TLSKey = "c.pem", "k.pem"
	require.True(t, c.ConsoleSecureCookies())
	c = Config{Env: "production"}
	require.True(t, c.ConsoleSecureCookies())
}

// refusesNonLoopback: env takes a loopback address in production, any
// other only with allow true, and any address in development.
func refusesNonLoopback(t *testing.T, env, allow string) {
	for _, addr := range []string{"127.0.0.1:9090", "127.0.0.2:9090", "[::1]:9090", "localhost:9090"} {
		require.NoError(t, loadProduction(t, map[string]string{env: addr}), "%s=%s", env, addr)
	}
	for _, addr := range []string{":9090", "0.0.0.0:9090", "[::]:9090", "10.0.0.5:9090", "metrics.internal:9090"} {
		err := loadProduction(t, map[string]string{env: addr, allow: "false"})
		require.Error(t, err, "%s=%s", env, addr)
		require.Contains(t, err.Error(), env+": must be a loopback address")
		require.Contains(t, err.Error(), allow)
		require.NoError(t, loadProduction(t, map[string]string{env: addr, allow: "true"}), "%s=%s allowed", env, addr)

		baseEnv(t)
		t.Setenv("SVC_ENV", "development")
		t.Setenv(allow, "false")
		t.Setenv(env, addr)
		_, err = load("")
		require.NoError(t, err, "development: %s=%s", env, addr)
	}
}

// TestProductionRefusesWeakSettings: in production the processor, the
// TRON node and the platform are reached over https (http only to
// loopback), and the webhook secrets are long and not the local run's.
func TestProductionRefusesWeakSettings(t *testing.T) {
	set := loadProduction
	require.NoError(t, set(t, nil))
	require.NoError(t, set(t, map[string]string{"BTCPAY_URL": "http://127.0.0.1:8090", "TRONGRID_URL": "http://localhost:8090/tron"}),
		"http to this machine is allowed")
	for _, tc := range []struct{ env, value string }{
		{"BTCPAY_URL", "http://btcpay.example"},
		{"TRONGRID_URL", "http://api.trongrid.io"},
		{"PLATFORM_WEBHOOK_URL", "http://platform.example/hooks"},
		{"PROCESSOR_WEBHOOK_SECRET", "x"},
		{"PLATFORM_WEBHOOK_SECRET", "local-platform-secret"},
	} {
		err := set(t, map[string]string{tc.env: tc.value})
		require.Error(t, err, tc.env)
		require.Contains(t, err.Error(), tc.env)
	}
}

// TestCheckpointKey: LEDGER_CHECKPOINT_SIGNING_KEY takes the 32-byte seed
// or the 64-byte private key, in hex or base64, and the error never shows
// the key.
func TestCheckpointKey(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i * 7)
	}
	want := ed25519.NewKeyFromSeed(seed)
	for _, s := range []string{
		hex.EncodeToString(seed), hex.EncodeToString(want), base64.StdEncoding.EncodeToString(seed),
		base64.RawStdEncoding.EncodeToString(seed), base64.StdEncoding.EncodeToString(want), " " + hex.EncodeToString(seed) + "\n",
	} {
		k, err := Ledger{CheckpointSigningKey: s}.CheckpointKey()
		require.NoError(t, err, s)
		require.Equal(t, want, k)
	}
	k, err := Ledger{}.CheckpointKey()
	require.NoError(t, err)
	require.Nil(t, k, "unset: unsigned")
	bad := append(append([]byte{}, seed...), make([]byte, 32)...) // a private key with a wrong public half
	_, err = Ledger{CheckpointSigningKey: hex.EncodeToString(bad)}.CheckpointKey()
	require.Error(t, err)
	require.NotContains(t, err.Error(), hex.EncodeToString(seed))
}

// A primary and its standbys in one URL, as pgx reads it: accepted as is.
func TestDatabaseURLWithSeveralHosts(t *testing.T) {
	baseEnv(t)
	multi := "postgres://svc_app@db-a:5432,db-b:5432/svc?target_session_attrs=read-write&connect_timeout=3"
	t.Setenv("DATABASE_URL", multi)
	t.Setenv("MIGRATE_DATABASE_URL", "postgres://svc_owner@db-a:5432,db-b:5432/svc?target_session_attrs=read-write")
	cfg, err := load("")
	require.NoError(t, err)
	require.Equal(t, multi, cfg.Database.URL)
}
