package withdrawal_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
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
	b := e.UserBalance(t, "alice", asset.BTC)
	require.Equal(t, "0.00070000", b.Held)
	require.EqualValues(t, 70_000, e.windowTotal(t, asset.BTC))

	// The key stored the answer: a retry replays it, and creates nothing.
	again := e.Do(apptestReq(body, "one-trip"))
	require.Equal(t, http.StatusCreated, again.Status)
	require.JSONEq(t, string(r.Body), string(again.Body))
	require.EqualValues(t, 1, e.Svc.CreatedInOneRoundTrip())
	require.Equal(t, "0.00070000", e.UserBalance(t, "alice", asset.BTC).Held)
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

// TestOneRoundTripKeyRaces: parallel requests with one Idempotency-Key and
// one body, with the copy warm, create one withdrawal; every answer is
// that withdrawal's 201 or a 409 while it was in flight, and the losers'
// reservations are given back. A 402 on this path is the key's answer too.
func TestOneRoundTripKeyRaces(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "k", asset.BTC, 100_000)
	e.create(t, "k", asset.BTC, 10_000, p2wpkh(t, chain.Regtest, "warm"))
	body := createBody{ExternalUserID: "k", Asset: asset.BTC, Amount: "20000", Destination: p2wpkh(t, chain.Regtest, "race")}
	const parallel = 12
	answers := make([]*apptest.Response, parallel)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.Do(apptestReq(body, "race-key"))
		}()
	}
	wg.Wait()
	ids := map[string]bool{}
	for _, r := range answers {
		switch r.Status {
		case http.StatusCreated:
			ids[r.Map(t)["withdrawal_id"].(string)] = true
		case http.StatusConflict:
		default:
			t.Fatalf("answer %d: %s", r.Status, r.Body)
		}
	}
	require.Len(t, ids, 1, "one withdrawal for the key")
	require.Equal(t, "0.00030000", e.UserBalance(t, "k", asset.BTC).Held)
	require.EqualValues(t, 30_000, e.windowTotal(t, asset.BTC), "the losers' reservations were given back")

	// Too much for the balance: 402, stored as the key's answer.
	trips := e.Svc.CreatedInOneRoundTrip()
	short := createBody{ExternalUserID: "k", Asset: asset.BTC, Amount: "90000", Destination: p2wpkh(t, chain.Regtest, "short")}
	r := e.Do(apptestReq(short, "short-key"))
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	e.fund(t, "k", asset.BTC, 100_000)
	again := e.Do(apptestReq(short, "short-key"))
	require.Equal(t, http.StatusPaymentRequired, again.Status, "the key keeps its answer")
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, trips, e.Svc.CreatedInOneRoundTrip())
	require.EqualValues(t, 30_000, e.windowTotal(t, asset.BTC))
	e.requireBooks(t)
}

// TestOneRoundTripRefusalKeepsItsConnection: a one-round-trip creation
// that the database refuses (the daily cap, the service's own deposit
// address) hands its connection back to the pool healthy, not in a failed
// transaction block the pool would destroy: ten refusals, answered the
// ordinary way, open no new PostgreSQL connection.
func TestOneRoundTripRefusalKeepsItsConnection(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// The capped withdrawals' events would be woken by an insert of their
	// own, beside the requests, on a connection the pool may open for it:
	// here only the Waker's Close wakes them.
	e.App.Events.Waker.Delay = time.Hour
	e.fund(t, "u", asset.BTC, 10_000_000)
	e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "warm-0"))
	e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "warm-1"))
	require.EqualValues(t, 1, e.Svc.CreatedInOneRoundTrip(), "the copy is warm")
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "other", "asset": "BTC"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	own := r.Map(t)["address"].(string)
	e.limits(t, asset.BTC, asset.Limits{DailyCap: n(e.windowTotal(t, asset.BTC) + 10_000)})
	e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "warm-2")) // the copy knows the cap

	refuse := func(i int) {
		t.Helper()
		if i%2 == 0 {
			w := e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, fmt.Sprint("capped-", i)))
			require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
			require.True(t, strings.HasPrefix(*w.ApprovalReason, "withdrawal_daily_cap:"), *w.ApprovalReason)
			return
		}
		r := e.request("u", asset.BTC, 20_000, own)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		require.Contains(t, detail(t, r), "own deposit addresses")
	}
	refuse(0) // the ordinary way's statements have their connections
	refuse(1)
	trips := e.Svc.CreatedInOneRoundTrip()
	before := e.App.DB.Pool.Stat().NewConnsCount()
	for i := range 10 {
		refuse(i)
	}
	require.Equal(t, trips, e.Svc.CreatedInOneRoundTrip(), "each was refused, then answered the ordinary way")
	require.Equal(t, before, e.App.DB.Pool.Stat().NewConnsCount(), "no refusal cost a new connection")
}
