package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/modules/operator/operatortest"
)

// TestAdminKeysRestricted: svc admin keys mint --scope read_only with
// --allow-cidr (repeatable) and --expires-in, signed by an admin; keys list
// shows the scope, the expiry and the allowed networks, as a table and as
// JSON; a network with host bits is refused before anything is signed.
func TestAdminKeysRestricted(t *testing.T) {
	d := migratedDB(t)
	ada := operatorKeys(t, d, operatortest.Member{Name: "ada", Role: operator.Admin})["ada"]

	_, err := run(t, "admin", "keys", "mint", "--scope", "read_only", "--label", "dash", "--allow-cidr", "10.0.0.1/8", "--key", ada)
	require.ErrorContains(t, err, "--allow-cidr: allowed network \"10.0.0.1/8\" has host bits set: did you mean 10.0.0.0/8?")
	out, err := run(t, "admin", "keys", "mint", "--scope", "read_only", "--label", "dash", "--expires-in", "720h",
		"--allow-cidr", "10.0.0.0/8", "--allow-cidr", "2001:db8::/32", "--key", ada)
	require.NoError(t, err, out)
	require.Contains(t, out, "scope read_only")
	require.Contains(t, out, "allowed from 10.0.0.0/8,2001:db8::/32")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	key := lines[len(lines)-1]
	out, err = run(t, "admin", "keys", "mint", "--scope", "readwrite", "--label", "backend", "--key", ada)
	require.NoError(t, err, out)

	out, err = run(t, "admin", "keys", "list")
	require.NoError(t, err, out)
	require.NotContains(t, out, key[9:], "list never shows a secret")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, rows, 3, out)
	require.Equal(t, []string{"ID", "SCOPE", "MODE", "LABEL", "CREATED", "EXPIRES", "REVOKED", "LAST", "USED", "ALLOWED", "FROM"}, strings.Fields(rows[0]))
	backend, dash := strings.Fields(rows[1]), strings.Fields(rows[2])
	require.Equal(t, []string{"readwrite", "test", "backend"}, backend[1:4])
	require.Equal(t, "-", backend[5], "no expiry")
	require.Equal(t, "anywhere", backend[len(backend)-1])
	require.Equal(t, []string{"read_only", "test", "dash"}, dash[1:4])
	require.Regexp(t, `^\d{4}-\d\d-\d\dT`, dash[5], "the expiry")
	require.Equal(t, "10.0.0.0/8,2001:db8::/32", dash[len(dash)-1])

	out, err = run(t, "admin", "keys", "list", "--json")
	require.NoError(t, err, out)
	var ks []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &ks), out)
	require.Len(t, ks, 2)
	require.Equal(t, "read_only", ks[1]["scope"])
	require.NotNil(t, ks[1]["expires_at"])
	require.Equal(t, []any{"10.0.0.0/8", "2001:db8::/32"}, ks[1]["allowed_cidrs"])
	require.Equal(t, []any{}, ks[0]["allowed_cidrs"])
	require.Nil(t, ks[0]["expires_at"])
	require.NotContains(t, out, key[9:])
}
