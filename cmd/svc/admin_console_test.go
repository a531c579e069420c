package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/console"
	"svc/platform/dbtest"
	"svc/platform/logtest"
)

// TestAdminConsole: svc admin console listens where it says, on a URL
// whose host is the WebAuthn RP id, serves the sign-in page under the
// console's Content-Security-Policy, sends every other page to it, and
// stops when interrupted.
func TestAdminConsole(t *testing.T) {
	t.Setenv("DATABASE_URL", dbtest.NewURL(t))
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")

	base := "http://127.0.0.1:" + startConsole(t, "http")

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Get(base + "/sign-in")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, console.ContentSecurityPolicy, res.Header.Get("Content-Security-Policy"))
	res, err = noRedirect.Get(base + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/sign-in", res.Header.Get("Location"))

}

// startConsole runs svc admin console --addr 127.0.0.1:0 until the test
// ends, when it must stop; it returns the port of the URL it prints,
// which has scheme and the RP id's host.
func startConsole(t *testing.T, scheme string) string {
	var buf logtest.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&buf)
	cmd.SetErr(&buf)
	cmd.SetArgs([]string{"admin", "console", "--addr", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("svc admin console did not stop")
		}
	})
	re := regexp.MustCompile(`console on ` + scheme + `://localhost:(\d+)/`)
	require.Eventually(t, func() bool { return re.MatchString(buf.String()) }, 10*time.Second, 20*time.Millisecond, buf.String())
	return re.FindStringSubmatch(buf.String())[1]
}

// TestAdminConsoleServesHTTPS: with CONSOLE_TLS_CERT and CONSOLE_TLS_KEY
// the console serves HTTPS, TLS 1.2 or later, with
// Strict-Transport-Security and Secure cookies.
func TestAdminConsoleServesHTTPS(t *testing.T) {
	t.Setenv("DATABASE_URL", dbtest.NewURL(t))
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	certFile, keyFile := selfSigned(t)
	t.Setenv("CONSOLE_TLS_CERT", certFile)
	t.Setenv("CONSOLE_TLS_KEY", keyFile)

	addr := "127.0.0.1:" + startConsole(t, "https")

	client := func(max uint16) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, // a test's own certificate
			MinVersion: tls.VersionTLS10, MaxVersion: max}}}
	}
	res, err := client(0).Get("https://" + addr + "/sign-in")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotEmpty(t, res.Header.Get("Strict-Transport-Security"))
	require.NotEmpty(t, res.Cookies())
	for _, c := range res.Cookies() {
		require.True(t, c.Secure, c.Name)
	}
	_, err = client(tls.VersionTLS11).Get("https://" + addr + "/sign-in")
	require.Error(t, err, "TLS 1.1 is refused")

}

// selfSigned writes a self-signed certificate for localhost and its key,
// and returns their files.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

// TestAdminConsoleNeedsTLSOffLoopbackInProduction: in production svc admin
// console refuses a non-loopback --addr without CONSOLE_TLS_CERT and
// CONSOLE_TLS_KEY, as it refuses such a CONSOLE_ADDR, before it connects
// to anything.
func TestAdminConsoleNeedsTLSOffLoopbackInProduction(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://svc@127.0.0.1:1/svc?sslmode=disable&connect_timeout=1")
	t.Setenv("BITCOIN_NETWORK", "regtest")
	t.Setenv("LOG_LEVEL", "error")
	t.Setenv("SVC_ENV", "production")
	t.Setenv("API_KEY_MODE", "live")
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.1.2.3:8093"} {
		out, err := run(t, "admin", "console", "--addr", addr)
		require.Error(t, err, out)
		require.Contains(t, err.Error(), "CONSOLE_ADDR: must be a loopback address", addr)
	}
	t.Setenv("CONSOLE_ADDR", "0.0.0.0:8093")
	_, err := run(t, "admin", "console")
	require.ErrorContains(t, err, "CONSOLE_ADDR: must be a loopback address")

	// With TLS: the address is taken, and the command goes on to the
	// database (unreachable here).
	t.Setenv("CONSOLE_TLS_CERT", "cert.pem")
	t.Setenv("CONSOLE_TLS_KEY", "key.pem")
	_, err = run(t, "admin", "console", "--addr", "0.0.0.0:0")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "CONSOLE_ADDR")
}
