package apikey_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/config"
	"svc/platform/fault"
)

// sign signs x now with s.
func sign(t *testing.T, s *operator.Signer, x operator.Expect) *operator.Envelope {
	t.Helper()
	env := operatortest.Sign(t, s, operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now()))
	return &env
}

// TestMintAndRevokeSigned: an admin's signature of the label, scope, mode
// and lifetime mints a key, and of its id revokes it, each as op:NAME in
// the audit trail; the same statement again is 401, a statement of other
// facts 403 (another scope, lifetime or allow-list), an approver's 403; with OPERATOR_SIGNATURES=required an
// unsigned mint or revocation is 401.
func TestMintAndRevokeSigned(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	keys := e.App.Keys
	team := operatortest.Team(t, e.App.DB.Bun, time.Now, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver})
	x := apikey.MintExpect(" backend ", apikey.ScopeReadWrite, keys.Mode, 720*time.Hour)
	require.Equal(t, operator.Expect{Action: audit.KeyMint, Resource: "backend", Role: operator.Admin,
		Facts: map[string]string{"label": "backend", "scope": "readwrite", "mode": "test", "expires_in": "720h0m0s"}}, x)
	p := apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "backend", ExpiresIn: 720 * time.Hour, Signature: sign(t, team["ada"], x)}
	k, plain, err := keys.Mint(ctx, p)
	require.NoError(t, err)
	require.NotEmpty(t, plain)
	_, _, err = keys.Mint(ctx, p)
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "replayed: %v", err)
	longer := p
	longer.ExpiresIn, longer.Signature = 0, sign(t, team["ada"], x)
	_, _, err = keys.Mint(ctx, longer)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "signed 720h, asked no expiry: %v", err)
	admin := apikey.MintParams{Scope: apikey.ScopeAdmin, Label: "backend", ExpiresIn: 720 * time.Hour, Signature: sign(t, team["ada"], x)}
	_, _, err = keys.Mint(ctx, admin)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "signed readwrite, asked admin: %v", err)
	p.Signature = sign(t, team["bob"], x)
	_, _, err = keys.Mint(ctx, p)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "an approver does not mint: %v", err)

	// A read_only key restricted to networks: the signature covers the
	// scope and the networks, in canonical form.
	ro := apikey.MintExpect("dash", apikey.ScopeReadOnly, keys.Mode, 0, "10.0.0.0/8", "2001:DB8::/32")
	require.Equal(t, map[string]string{"label": "dash", "scope": "read_only", "mode": "test", "allowed_cidrs": "10.0.0.0/8,2001:db8::/32"}, ro.Facts)
	wider := apikey.MintParams{Scope: apikey.ScopeReadOnly, Label: "dash", AllowedCIDRs: []string{"0.0.0.0/0"}, Signature: sign(t, team["ada"], ro)}
	_, _, err = keys.Mint(ctx, wider)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "signed two networks, asked anywhere: %v", err)
	unrestricted := apikey.MintParams{Scope: apikey.ScopeReadOnly, Label: "dash", Signature: sign(t, team["ada"], ro)}
	_, _, err = keys.Mint(ctx, unrestricted)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "signed two networks, asked none: %v", err)
	dash, _, err := keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadOnly, Label: "dash", AllowedCIDRs: []string{"10.0.0.0/8", "2001:db8::/32"},
		Signature: sign(t, team["ada"], ro)})
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "2001:db8::/32"}, dash.AllowedCIDRs)

	_, err = keys.RevokeSigned(ctx, k.ID, audit.Actor{}, sign(t, team["bob"], apikey.RevokeExpect(k.ID)))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "an approver does not revoke: %v", err)
	_, err = keys.RevokeSigned(ctx, k.ID, audit.Actor{}, sign(t, team["ada"], apikey.RevokeExpect(e.AdminKeyID)))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "signed another key: %v", err)
	_, err = keys.Authenticate(ctx, plain)
	require.NoError(t, err, "still active")
	revoke := sign(t, team["ada"], apikey.RevokeExpect(k.ID))
	got, err := keys.RevokeSigned(ctx, k.ID, audit.Actor{}, revoke)
	require.NoError(t, err)
	require.NotNil(t, got.RevokedAt)
	_, err = keys.RevokeSigned(ctx, k.ID, audit.Actor{}, revoke)
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "replayed: %v", err)
	_, err = keys.Authenticate(ctx, plain)
	require.ErrorIs(t, err, apikey.ErrInvalid)

	trail, _, err := audit.List(ctx, e.App.DB.Bun, audit.ListParams{})
	require.NoError(t, err)
	type row struct{ actor, action, target string }
	var rows []row
	for _, x := range trail {
		if x.Action == audit.KeyMint || x.Action == audit.KeyRevoke {
			rows = append(rows, row{x.Actor, x.Action, x.Target})
		}
	}
	require.Equal(t, []row{{"op:ada", audit.KeyRevoke, k.ID}, {"op:ada", audit.KeyMint, dash.ID}, {"op:ada", audit.KeyMint, k.ID},
		{"cli:apptest", audit.KeyMint, e.AdminKeyID}, {"cli:apptest", audit.KeyMint, rows[4].target}}, rows, "newest first; the refused ones are not recorded")

	req := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	_, _, err = req.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "backend", Actor: audit.CLI("ops")})
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "unsigned: %v", err)
	_, err = req.App.Keys.Revoke(ctx, req.AdminKeyID, audit.CLI("ops"))
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "unsigned: %v", err)
}
