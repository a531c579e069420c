package asset_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/platform/config"
	"svc/platform/fault"
)

func n(v int64) *int64 { return &v }

// sign signs x now with s.
func sign(t *testing.T, s *operator.Signer, x operator.Expect) *operator.Envelope {
	t.Helper()
	env := operatortest.Sign(t, s, operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now()))
	return &env
}

// TestSetLimitsSigned: an admin's signature of each limit being set, in
// display units, sets them, as op:NAME in the audit trail; the same
// statement again is 401, a statement of another value 403, an approver's
// 403, and nothing changes; with OPERATOR_SIGNATURES=required an unsigned
// change is 401.
func TestSetLimitsSigned(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	team := operatortest.Team(t, e.App.DB.Bun, time.Now, operatortest.Member{Name: "ada", Role: operator.Admin},
		operatortest.Member{Name: "bob", Role: operator.Approver})
	btc, err := e.App.Assets.Get(ctx, asset.BTC)
	require.NoError(t, err)
	l := asset.Limits{Min: n(20_000), FourEyesThreshold: &asset.Optional{Value: 5_000_000}, UserDailyCap: &asset.Optional{Off: true}}
	x := asset.SetLimitsExpect(btc, l)
	require.Equal(t, operator.Expect{Action: audit.AssetSetLimits, Resource: "BTC", Role: operator.Admin, Facts: map[string]string{
		"withdrawal_min": "0.00020000", "withdrawal_four_eyes_threshold": "0.05000000", "withdrawal_user_daily_cap": "off"}}, x)

	env := sign(t, team["ada"], x)
	got, err := e.App.Assets.SetLimitsSigned(ctx, asset.BTC, l, audit.Actor{}, env)
	require.NoError(t, err)
	require.Equal(t, int64(20_000), got.WithdrawalMin)
	require.Equal(t, int64(5_000_000), *got.WithdrawalFourEyesThreshold)
	trail, _, err := audit.List(ctx, e.App.DB.Bun, audit.ListParams{Action: audit.AssetSetLimits})
	require.NoError(t, err)
	require.Len(t, trail, 1)
	require.Equal(t, "op:ada", trail[0].Actor)

	_, err = e.App.Assets.SetLimitsSigned(ctx, asset.BTC, l, audit.Actor{}, env)
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "replayed: %v", err)
	other := asset.Limits{Min: n(30_000), FourEyesThreshold: l.FourEyesThreshold, UserDailyCap: l.UserDailyCap}
	_, err = e.App.Assets.SetLimitsSigned(ctx, asset.BTC, other, audit.Actor{}, sign(t, team["ada"], x))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "signed 0.0002, asked 0.0003: %v", err)
	_, err = e.App.Assets.SetLimitsSigned(ctx, asset.BTC, l, audit.Actor{}, sign(t, team["bob"], x))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "an approver does not set limits: %v", err)
	_, err = e.App.Assets.SetLimitsSigned(ctx, asset.BTCLN, l, audit.Actor{}, sign(t, team["ada"], x))
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "another asset: %v", err)
	trail, _, err = audit.List(ctx, e.App.DB.Bun, audit.ListParams{Action: audit.AssetSetLimits})
	require.NoError(t, err)
	require.Len(t, trail, 1, "the refused changes are not recorded")
	btc, err = e.App.Assets.Get(ctx, asset.BTC)
	require.NoError(t, err)
	require.Equal(t, int64(20_000), btc.WithdrawalMin)

	req := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.Operators.Signatures = "required" }))
	_, err = req.App.Assets.SetLimits(ctx, asset.BTC, l, audit.CLI("ops"))
	require.Equal(t, fault.Unauthenticated, fault.KindOf(err), "unsigned: %v", err)
	_, err = req.App.Assets.SetLimitsSigned(ctx, "DOGE", l, audit.CLI("ops"), nil)
	require.ErrorIs(t, err, asset.ErrUnknown, "an unknown asset is 404 before anything is signed")
}
