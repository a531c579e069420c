package withdrawal_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/concurrencytest"
	"svc/platform/config"
	"svc/platform/idempotency"
)

// TestCreateAutoApproved: a withdrawal under every gate is approved at
// once with approval_mode auto, its gross held before the 201 returns; fee
// and net stay null until submission; GET reads the same.
func TestCreateAutoApproved(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "alice", asset.BTC, 100_000)
	dest := p2wpkh(t, chain.Regtest, "alice-1")
	w := e.create(t, "alice", asset.BTC, 40_000, dest)
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	require.Equal(t, "auto", *w.ApprovalMode)
	require.NotContains(t, w.raw, "approval_reason", "approval_reason is present only when a gate fired")
	require.Nil(t, w.Fee)
	require.Nil(t, w.AmountNet)
	require.Equal(t, "0.00040000", w.AmountGross)
	require.Equal(t, dest, w.DestinationAddress)
	b := e.UserBalance(t, "alice", asset.BTC)
	require.Equal(t, "0.00060000", b.Available)
	require.Equal(t, "0.00040000", b.Held)
	require.Equal(t, "0.00100000", b.Total)
	got := e.get(t, w.WithdrawalID)
	require.Equal(t, w.View, got)
	// The hold is in the user's history with the withdrawal id as source.
	r := e.Get("/v1/users/alice/transactions?asset=BTC")
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"kind":"withdrawal_hold"`)
	require.Contains(t, string(r.Body), w.WithdrawalID)
}

// TestCreateIdempotent: the same key and body replays the 201 with one
// hold; a different body with the key is 422.
func TestCreateIdempotent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "bob", asset.BTC, 100_000)
	body := createBody{ExternalUserID: "bob", Asset: asset.BTC, Amount: "30000", Destination: p2wpkh(t, chain.Regtest, "bob")}
	first := e.Do(apptestReq(body, "bob-key-1"))
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	again := e.Do(apptestReq(body, "bob-key-1"))
	require.Equal(t, http.StatusCreated, again.Status)
	require.Equal(t, string(first.Body), string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	body.Amount = "30001"
	other := e.Do(apptestReq(body, "bob-key-1"))
	require.Equal(t, http.StatusUnprocessableEntity, other.Status)
	require.Equal(t, "0.00030000", e.UserBalance(t, "bob", asset.BTC).Held)
}

// TestCreateKeyRules: creation claims its Idempotency-Key in its first
// statement (idempotency.Store.ClaimInHandler); the SPEC's key rules hold
// through it. Twenty identical requests at once make one withdrawal and
// one hold, each answering the same 201 or 409 in flight; a refusal
// before the claim (a body that does not parse) and one after it (an
// unknown asset) are final and replayed; the key stays bound to its body.
func TestCreateKeyRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "kim", asset.BTC, 1_000_000)
	body := createBody{ExternalUserID: "kim", Asset: asset.BTC, Amount: "30000", Destination: p2wpkh(t, chain.Regtest, "kim")}
	responses := make([]*apptest.Response, 20)
	concurrencytest.AtOnce(len(responses), func(i int) {
		responses[i] = e.Do(apptestReq(body, "kim-storm"))
	})
	var first string
	for _, r := range responses {
		switch r.Status {
		case http.StatusCreated:
			if first == "" {
				first = string(r.Body)
			}
			require.Equal(t, first, string(r.Body), "every 201 is the same withdrawal")
		case http.StatusConflict:
			require.Equal(t, "1", r.Header.Get("Retry-After"))
		default:
			t.Fatalf("unexpected %d %s", r.Status, r.Body)
		}
	}
	require.NotEmpty(t, first)
	require.Equal(t, "0.00030000", e.UserBalance(t, "kim", asset.BTC).Held, "one hold")
	again := e.Do(apptestReq(body, "kim-storm"))
	require.Equal(t, first, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))

	bad := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/withdrawals", Body: `{"external_user_id":`, Idem: "kim-bad"})
	require.Equal(t, http.StatusUnprocessableEntity, bad.Status, string(bad.Body))
	replay := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/withdrawals", Body: `{"external_user_id":`, Idem: "kim-bad"})
	require.Equal(t, string(bad.Body), string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"), "a refusal before the claim is stored too")
	require.Equal(t, http.StatusUnprocessableEntity, e.Do(apptestReq(body, "kim-bad")).Status, "the key is bound to its body")

	unknown := createBody{ExternalUserID: "kim", Asset: "DOGE", Amount: "30000", Destination: "x"}
	require.Equal(t, http.StatusNotFound, e.Do(apptestReq(unknown, "kim-doge")).Status)
	replay = e.Do(apptestReq(unknown, "kim-doge"))
	require.Equal(t, http.StatusNotFound, replay.Status)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "0.00030000", e.UserBalance(t, "kim", asset.BTC).Held)
	e.requireBooks(t)
}

// TestCreateBodyModel: bad bodies are 422 field errors and change nothing.
func TestCreateBodyModel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "carol", asset.BTC, 100_000)
	dest := p2wpkh(t, chain.Regtest, "carol")
	long := strings.Repeat("u", 256)
	for _, tc := range []struct {
		name string
		body any
		loc  string
	}{
		{"no body", "", "body"},
		{"not json", "{", "body"},
		{"missing user", map[string]any{"asset": "BTC", "amount": "20000", "destination_address": dest}, "external_user_id"},
		{"user too long", map[string]any{"external_user_id": long, "asset": "BTC", "amount": "20000", "destination_address": dest}, "external_user_id"},
		{"empty user", map[string]any{"external_user_id": "", "asset": "BTC", "amount": "20000", "destination_address": dest}, "external_user_id"},
		{"missing amount", map[string]any{"external_user_id": "carol", "asset": "BTC", "destination_address": dest}, "amount"},
		{"amount number", map[string]any{"external_user_id": "carol", "asset": "BTC", "amount": 20000, "destination_address": dest}, "amount"},
		{"amount decimal", map[string]any{"external_user_id": "carol", "asset": "BTC", "amount": "0.0002", "destination_address": dest}, "amount"},
		{"amount zero", map[string]any{"external_user_id": "carol", "asset": "BTC", "amount": "0", "destination_address": dest}, "amount"},
		{"amount negative", map[string]any{"external_user_id": "carol", "asset": "BTC", "amount": "-5", "destination_address": dest}, "amount"},
		{"missing destination", map[string]any{"external_user_id": "carol", "asset": "BTC", "amount": "20000"}, "destination_address"},
		{"destination too long", map[string]any{"external_user_id": "carol", "asset": "BTC", "amount": "20000", "destination_address": strings.Repeat("b", 2049)}, "destination_address"},
		{"asset too long", map[string]any{"external_user_id": "carol", "asset": strings.Repeat("A", 33), "amount": "20000", "destination_address": dest}, "asset"},
	} {
		r := e.Post("/v1/withdrawals", tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tc.name, r.Body)
		fe := r.FieldErrors(t)
		require.Contains(t, joinLoc(fe), tc.loc, tc.name)
	}
	require.Equal(t, "0.00000000", e.UserBalance(t, "carol", asset.BTC).Held)
}

func joinLoc(fe []map[string]any) string {
	var out []string
	for _, f := range fe {
		for _, l := range f["loc"].([]any) {
			if s, ok := l.(string); ok {
				out = append(out, s)
			}
		}
	}
	return strings.Join(out, ",")
}

// TestCreateAssetRules: an unknown asset is 404, a disabled one 503, whatever
// the destination.
func TestCreateAssetRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "dave", asset.BTC, 100_000)
	r := e.request("dave", "DOGE", 20_000, "x")
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
	_, err := e.App.Assets.SetEnabled(context.Background(), asset.BTC, false)
	require.NoError(t, err)
	r = e.request("dave", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "dave"))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	detail(t, r)
	r = e.request("dave", asset.BTC, 20_000, "x")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "the asset is refused before the destination: %s", r.Body)
	_, err = e.App.Assets.SetEnabled(context.Background(), asset.BTC, true)
	require.NoError(t, err)
}

// TestCreateInsufficient: 402 when available is short, even though
// available plus held would cover it; nothing is reserved.
func TestCreateInsufficient(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "erin", asset.BTC, 100_000)
	e.create(t, "erin", asset.BTC, 70_000, p2wpkh(t, chain.Regtest, "erin-1"))
	r := e.request("erin", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "erin-2"))
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "insufficient available BTC balance")
	r = e.request("nobody", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "nobody"))
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	b := e.UserBalance(t, "erin", asset.BTC)
	require.Equal(t, "0.00030000", b.Available)
	require.Equal(t, "0.00070000", b.Held)
	n, err := e.App.DB.Bun.NewSelect().Table("withdrawals").Count(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestCreateMinimumAndDust: below withdrawal_min is 422; with the minimum
// out of the way, a net of 546 sat after the 282 sat estimate is refused
// as dust and 547 accepted.
func TestCreateMinimumAndDust(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "fay", asset.BTC, 1_000_000)
	r := e.request("fay", asset.BTC, 9_999, p2wpkh(t, chain.Regtest, "fay"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "below the minimum withdrawal of 0.00010000 BTC")
	e.limits(t, asset.BTC, asset.Limits{Min: n(0)})
	const fee = 2 * 141 // the simulator's 2 sat/vB x BTC_ASSUMED_TX_VBYTES
	r = e.request("fay", asset.BTC, 546+fee, p2wpkh(t, chain.Regtest, "fay"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "net amount of 546 sat")
	require.Contains(t, detail(t, r), "dust limit of 546 sat")
	r = e.request("fay", asset.BTC, fee, p2wpkh(t, chain.Regtest, "fay"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "0.00000000", e.UserBalance(t, "fay", asset.BTC).Held, "nothing reserved by a refusal")
	// The volume was reserved with the key's claim, before the fee was
	// known: the dust refusals gave it back.
	require.Zero(t, e.windowTotal(t, asset.BTC), "refusals leave no volume behind")
	w := e.create(t, "fay", asset.BTC, 547+fee, p2wpkh(t, chain.Regtest, "fay"))
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	require.EqualValues(t, 547+fee, e.windowTotal(t, asset.BTC))
}

// TestCreateFeeRateUnavailable: when the processor cannot give a fee rate
// a BTC withdrawal is 503 and nothing is reserved; a retry with the same
// key succeeds once it can. Flat-fee assets do not need the processor.
func TestCreateFeeRateUnavailable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "gus", asset.BTC, 100_000)
	e.Sim.GoDown(btcpaysim.DownError)
	body := createBody{ExternalUserID: "gus", Asset: asset.BTC, Amount: "30000", Destination: p2wpkh(t, chain.Regtest, "gus")}
	r := e.Do(apptestReq(body, "gus-1"))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "nothing was reserved")
	require.Equal(t, "0.00000000", e.UserBalance(t, "gus", asset.BTC).Held)
	require.Zero(t, e.windowTotal(t, asset.BTC), "nor any of the daily volume")
	e.Sim.Up()
	r = e.Do(apptestReq(body, "gus-1"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "0.00030000", e.UserBalance(t, "gus", asset.BTC).Held)
	require.EqualValues(t, 30_000, e.windowTotal(t, asset.BTC), "counted once")
}

// TestFeeRateIsCached: a burst of withdrawals reads the processor's fee
// rate once, and a new one after BTC_FEE_RATE_TTL.
func TestFeeRateIsCached(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *config.Config) { c.Payouts.FeeRateTTL = time.Minute })
	e.fund(t, "hal", asset.BTC, 1_000_000)
	e.limits(t, asset.BTC, asset.Limits{Min: n(0)})
	e.create(t, "hal", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "hal"))
	// 5 sat/vB would make 1,000 sat dust; the cached 2 sat/vB does not.
	require.NoError(t, e.Sim.SetFeeRate("5"))
	e.create(t, "hal", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "hal"))
	e.Clock.Advance(61 * time.Second)
	r := e.request("hal", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "hal"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "estimated fee of 705 sat")
}

// TestCreateAfterTheKeyWasPruned: once the Idempotency-Key's record is
// gone (IDEMPOTENCY_RETENTION), a retry with the key still cannot make a
// second withdrawal: it answers the first as it is now, even when the
// balance would no longer cover it; other parameters with the key are 422.
func TestCreateAfterTheKeyWasPruned(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "pat", asset.BTC, 50_000)
	body := createBody{ExternalUserID: "pat", Asset: asset.BTC, Amount: "40000", Destination: p2wpkh(t, chain.Regtest, "pat")}
	first := e.Do(apptestReq(body, "pat-key"))
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	var v withdrawal.View
	first.JSON(t, &v)
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "DELETE FROM idempotency_keys WHERE key = 'platform:pat-key'")
	require.NoError(t, err)
	again := e.Do(apptestReq(body, "pat-key"))
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	var w withdrawal.View
	again.JSON(t, &w)
	require.Equal(t, v.WithdrawalID, w.WithdrawalID)
	require.Equal(t, "0.00040000", e.UserBalance(t, "pat", asset.BTC).Held, "one hold")
	_, err = e.App.DB.Bun.ExecContext(context.Background(), "DELETE FROM idempotency_keys WHERE key = 'platform:pat-key'")
	require.NoError(t, err)
	body.Amount = "5000"
	other := e.Do(apptestReq(body, "pat-key"))
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, string(other.Body))
	require.Contains(t, detail(t, other), "other parameters")
}

// TestCreateKeyTakenOver: an attempt whose Idempotency-Key was taken over
// by a retry (the first ran past the takeover window) never commits its
// withdrawal: the retry decides. When the retry already answered with a
// refusal (stored as the key's final answer), no withdrawal exists; when
// the retry creates it, there is exactly one. The first attempt answers
// 409 (retry) either way.
func TestCreateKeyTakenOver(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.fund(t, "tina", asset.BTC, 100_000)
	idem := &idempotency.Store{DB: e.App.DB.Bun, Now: e.Clock.Now}
	hash := idempotency.Hash(http.MethodPost, "/v1/withdrawals", []byte("tina"))
	takeOver := func(key string) (first, retry *idempotency.Record) {
		first, _, err := idem.Begin(ctx, key, http.MethodPost, "/v1/withdrawals", hash)
		require.NoError(t, err)
		e.Clock.Advance(idempotency.TakeoverAfter + time.Second)
		retry, stored, err := idem.Begin(ctx, key, http.MethodPost, "/v1/withdrawals", hash)
		require.NoError(t, err)
		require.Nil(t, stored)
		require.NotNil(t, retry, "the retry takes the key over")
		return first, retry
	}
	withdrawals := func() int {
		var n int
		require.NoError(t, e.App.DB.Bun.NewSelect().Table("withdrawals").ColumnExpr("count(*)").
			Where("external_user_id = 'tina'").Scan(ctx, &n))
		return n
	}
	params := func(key string) withdrawal.CreateParams {
		return withdrawal.CreateParams{ExternalUserID: "tina", Asset: asset.BTC, Amount: 30_000,
			Destination: p2wpkh(t, chain.Regtest, "tina"), IdempotencyKey: key}
	}

	// The retry answered first, with a refusal: the late first attempt
	// must not create the withdrawal behind the key's stored 422.
	first, retry := takeOver("tina-key-1")
	require.NoError(t, retry.CompleteTx(ctx, e.App.DB.Bun, http.StatusUnprocessableEntity, "application/json", []byte(`{"detail":"refused"}`)))
	_, _, err := e.Svc.Create(ctx, params("tina-key-1"), first)
	require.ErrorIs(t, err, withdrawal.ErrTakenOver)
	require.Zero(t, withdrawals(), "nothing behind a key that answered 422")
	require.Equal(t, "0.00000000", e.UserBalance(t, "tina", asset.BTC).Held)

	// The retry creates it: one withdrawal.
	first, retry = takeOver("tina-key-2")
	_, _, err = e.Svc.Create(ctx, params("tina-key-2"), first)
	require.ErrorIs(t, err, withdrawal.ErrTakenOver)
	v, _, err := e.Svc.Create(ctx, params("tina-key-2"), retry)
	require.NoError(t, err)
	require.Equal(t, 1, withdrawals(), "one withdrawal for the key")
	require.Equal(t, "0.00030000", e.UserBalance(t, "tina", asset.BTC).Held)
	require.Equal(t, withdrawal.StatusApproved, e.get(t, v.WithdrawalID).Status)
	e.requireBooks(t)
}

// TestCreateRefusesKeysThatFoldToAField: encoding/json matches a key to a
// field under Unicode case folding, where "ſ" (U+017F) is an "s": a
// "destination_addreſſ" after the exact key would be where the payout
// goes. Such a key is a 422 naming it, and nothing is reserved.
func TestCreateRefusesKeysThatFoldToAField(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "carol", asset.BTC, 100_000)
	dest, other := p2wpkh(t, chain.Regtest, "carol"), p2wpkh(t, chain.Regtest, "mallory")
	for _, tc := range []struct{ body, key, field string }{
		{fmt.Sprintf(`{"external_user_id":"carol","asset":"BTC","amount":"20000","destination_address":%q,"destination_addreſſ":%q}`, dest, other),
			"destination_addreſſ", "destination_address"},
		{fmt.Sprintf(`{"external_user_id":"carol","asset":"BTC","amount":"20000","destination_address":%q,"destination_addre\u017f\u017f":%q}`, dest, other),
			"destination_addreſſ", "destination_address"},
		{fmt.Sprintf(`{"external_user_id":"carol","external_uſer_id":"mallory","asset":"BTC","amount":"20000","destination_address":%q}`, dest),
			"external_uſer_id", "external_user_id"},
	} {
		e.RequireFieldNameRefused(t, "/v1/withdrawals", tc.body, tc.key, tc.field)
	}
	require.Equal(t, "0.00000000", e.UserBalance(t, "carol", asset.BTC).Held)
	require.Equal(t, "0.00000000", e.UserBalance(t, "mallory", asset.BTC).Held)
}
