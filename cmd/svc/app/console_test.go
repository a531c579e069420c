package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app"
	"svc/platform/config"
)

// TestRelyingPartyOriginsIncludeTheConsole: without
// OPERATOR_WEBAUTHN_ORIGINS, the origins a passkey may sign from are the
// RP id's (http:// outside production only) and the console's own: the RP
// id on CONSOLE_ADDR's port, https:// when the console serves HTTPS.
func TestRelyingPartyOriginsIncludeTheConsole(t *testing.T) {
	cfg := config.Config{Env: "development"}
	cfg.Operators.WebAuthnRPID = "localhost"
	cfg.Console.Addr = "127.0.0.1:8093"
	require.Equal(t, []string{"https://localhost", "http://localhost", "http://localhost:8093"}, app.RelyingParty(cfg).Origins)

	cfg.Env = "production"
	cfg.Operators.WebAuthnRPID = "console.example.com"
	cfg.Console.Addr = "10.0.0.5:8443"
	cfg.Console.TLSCert, cfg.Console.TLSKey = "c.pem", "k.pem"
	require.Equal(t, []string{"https://console.example.com", "https://console.example.com:8443"}, app.RelyingParty(cfg).Origins)

	cfg.Operators.WebAuthnOrigins = []string{"https://ops.example.com"}
	require.Equal(t, []string{"https://ops.example.com"}, app.RelyingParty(cfg).Origins, "set origins are taken as they are")
}
