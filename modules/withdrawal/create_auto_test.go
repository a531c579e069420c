package withdrawal_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// TestCreateInOneRoundTrip: once a creation has read the asset's row, the
// next auto-approved ones are created in one round trip, with the same
// answer, row, hold and stored response as the ordinary way.
func TestCreateInOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "alice", asset.BTC, 1_000_000)
	first := e.create(t, "alice", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "first"))
	require.Zero(t, e.Svc.CreatedInOneRoundTrip(), "no copy of the asset yet: the ordinary way")

	dest := p2wpkh(t, chain.Regtest, "second")
	body := createBody{ExternalUserID: "alice", Asset: asset.BTC, Amount: "30000", Destination: dest}
	r := e.Do(apptestReq(body, "one-trip"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.EqualValues(t, 1, e.Svc.CreatedInOneRoundTrip())
	var w created
	r.JSON(t, &w)
	w.raw = r.Map(t)
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	require.Equal(t, "auto", *w.ApprovalMode)
	require.Equal(t, dest, w.DestinationAddress)
	require.Equal(t, "0.00030000", w.AmountGross)
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	require.ElementsMatch(t, keys(first.raw), keys(w.raw), "the same fields as the ordinary way's answer")
	require.Equal(t, w.View, e.get(t, w.WithdrawalID))
	b := e.balance(t, "alice", asset.BTC)
	require.Equal(t, "0.00070000", b.Held)
	require.EqualValues(t, 70_000, e.windowTotal(t, asset.BTC))

	// The key stored the answer: a retry replays it, and creates nothing.
	again := e.Do(apptestReq(body, "one-trip"))
	require.Equal(t, http.StatusCreated, again.Status)
	require.JSONEq(t, string(r.Body), string(again.Body))
	require.EqualValues(t, 1, e.Svc.CreatedInOneRoundTrip())
	require.Equal(t, "0.00070000", e.balance(t, "alice", asset.BTC).Held)
	e.requireBooks(t)
}

// TestOneRoundTripTrustsNoStaleCopy: whatever changed since the service
// copied the asset's row, and whatever the copy cannot know, the answer is
// the ordinary way's: a limit lowered or an insolvency halt set by hand in
// the database, the service's own deposit address, the daily cap.
func TestOneRoundTripTrustsNoStaleCopy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.fund(t, "u", asset.BTC, 10_000_000)
	warm := func() {
		t.Helper()
		before := e.Svc.CreatedInOneRoundTrip()
		e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, fmt.Sprint("warm-", before)))
	}
	warm()
	warm()
	require.EqualValues(t, 1, e.Svc.CreatedInOneRoundTrip(), "the copy is warm")

	// A limit lowered behind the service's back.
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE assets SET withdrawal_auto_limit = 10000 WHERE asset = 'BTC'")
	require.NoError(t, err)
	w := e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "lowered"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	require.True(t, strings.HasPrefix(*w.ApprovalReason, "withdrawal_auto_limit:"), *w.ApprovalReason)
	require.EqualValues(t, 1, e.Svc.CreatedInOneRoundTrip())

	// An insolvency halt, written as reconciliation writes it.
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1_000_000)})
	warm()
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE assets SET withdrawals_halted_since = now() WHERE asset = 'BTC'")
	require.NoError(t, err)
	w = e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "halted"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	require.True(t, strings.HasPrefix(*w.ApprovalReason, "insolvency:"), *w.ApprovalReason)
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE assets SET withdrawals_halted_since = NULL WHERE asset = 'BTC'")
	require.NoError(t, err)

	// The service's own deposit address, issued after the copy was made.
	warm()
	trips := e.Svc.CreatedInOneRoundTrip()
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "other", "asset": "BTC"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	volume := e.windowTotal(t, asset.BTC)
	r = e.request("u", asset.BTC, 20_000, r.Map(t)["address"].(string))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "own deposit addresses")
	require.Equal(t, volume, e.windowTotal(t, asset.BTC), "the refusal left no volume behind")
	require.Equal(t, trips, e.Svc.CreatedInOneRoundTrip())

	// The daily cap: the volume so far plus this one is above it.
	e.limits(t, asset.BTC, asset.Limits{DailyCap: n(volume + 30_000)})
	warm()
	trips = e.Svc.CreatedInOneRoundTrip()
	w = e.create(t, "u", asset.BTC, 10_001, p2wpkh(t, chain.Regtest, "capped"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	require.True(t, strings.HasPrefix(*w.ApprovalReason, "withdrawal_daily_cap:"), *w.ApprovalReason)
	require.Equal(t, trips, e.Svc.CreatedInOneRoundTrip())
	e.requireBooks(t)
}

// TestGatesStrictInOneRoundTrip: with the copy warm, 50 parallel requests
// that together cross the daily cap auto-approve exactly as many as fit,
// and the ones that fit are created in one round trip.
func TestGatesStrictInOneRoundTrip(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const each, capUnits, parallel = 20_000, 333_000, 50 // room for 16, one of them the warm-up
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1_000_000), DailyCap: n(capUnits)})
	e.fund(t, "warm", asset.BTC, 100_000)
	e.create(t, "warm", asset.BTC, each, p2wpkh(t, chain.Regtest, "warm"))
	for i := 0; i < parallel; i++ {
		e.fund(t, fmt.Sprint("user-", i), asset.BTC, 100_000)
	}
	auto := e.autoApprovedInParallel(t, parallel, each, func(i int) string { return fmt.Sprint("user-", i) })
	require.Equal(t, capUnits/each-1, auto, "exactly as many as fit under the cap are auto-approved")
	require.Positive(t, e.Svc.CreatedInOneRoundTrip())
	e.requireBooks(t)
}
