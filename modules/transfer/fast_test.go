package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/transfer"
)

// TestFastWayGivesTheOrdinaryAnswers: a transfer with a new key is
// created the fast way (one transaction that claims the key); every
// answer that way cannot give (a replay, another request with the key, a
// leg short of funds, a client_reference used, an asset unknown or
// disabled after the assets were copied) is the ordinary way's, and
// leaves nothing behind.
func TestFastWayGivesTheOrdinaryAnswers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	e.fund(t, "a", asset.USDTTRC20, 1_000)
	svc := e.App.Transfers
	post := func(b body, key string) *apptest.Response {
		t.Helper()
		return e.Do(apptest.Req{Method: "POST", Path: "/v1/transfers", Body: b, Idem: key})
	}
	requireFast := func(want int64) {
		t.Helper()
		require.Equal(t, want, svc.FastCreated(), "transfers created the fast way")
	}

	// The common case: the fast way, with its rows, its entry and its
	// event and delivery job.
	b := body{Legs: []leg{l("a", "b", asset.BTC, 400)}, Metadata: map[string]string{"order": "1"}, ClientReference: ptr("order-1")}
	first := post(b, "fast-1")
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	requireFast(1)
	var v transfer.View
	first.JSON(t, &v)
	require.Equal(t, v, e.get(t, v.TransferID))
	require.Equal(t, "0.00000400", v.Legs[0].Amount)
	r := e.Get("/v1/users/b/transfers")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), v.TransferID)
	require.Equal(t, int64(600), e.available(t, "a", asset.BTC))
	require.Equal(t, int64(400), e.available(t, "b", asset.BTC))
	require.Len(t, e.events(t), 1)
	// Its delivery is woken once it committed, by a job that names it
	// among the events committed with it (event.Waker), not by a job of
	// its own in the transaction.
	apptest.Eventually(t, 10*time.Second, func() bool {
		return count(t, e, `SELECT count(*) FROM river_job j JOIN outbound_events o ON j.args->'event_ids' @> jsonb_build_array(o.id::text)
 WHERE j.kind = 'event_deliver_batch' AND o.type = 'transfer.completed'`) == 1
	}, "the transfer's event woken")
	require.Zero(t, count(t, e, `SELECT count(*) FROM river_job WHERE kind = 'event_deliver'`))

	// A replay: the same bytes, nothing more.
	again := post(b, "fast-1")
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.Body), string(again.Body))
	// The same key with another body: 422.
	other := post(body{Legs: []leg{l("a", "b", asset.BTC, 401)}}, "fast-1")
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, string(other.Body))
	requireFast(1)

	// A leg short of funds: 402 naming it, nothing written, and the key
	// answers 402 again.
	short := post(body{Legs: []leg{l("a", "b", asset.USDTTRC20, 10), l("b", "c", asset.BTC, 401)}}, "fast-2")
	require.Equal(t, http.StatusPaymentRequired, short.Status, string(short.Body))
	require.True(t, strings.HasPrefix(short.Map(t)["detail"].(string), "legs[1]: "), string(short.Body))
	retry := post(body{Legs: []leg{l("a", "b", asset.USDTTRC20, 10), l("b", "c", asset.BTC, 401)}}, "fast-2")
	require.Equal(t, http.StatusPaymentRequired, retry.Status, string(retry.Body))
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(short.Body), string(retry.Body))
	require.Equal(t, int64(1_000), e.available(t, "a", asset.USDTTRC20))
	require.Equal(t, 1, count(t, e, "SELECT count(*) FROM transfers"))
	require.Equal(t, 1, count(t, e, "SELECT count(*) FROM transfer_legs"))
	require.Equal(t, 1, count(t, e, "SELECT count(*) FROM ledger_entries WHERE kind = 'transfer'"))
	require.Len(t, e.events(t), 1)

	// A client_reference used: 409 naming the first transfer.
	r = post(body{Legs: []leg{l("a", "c", asset.BTC, 1)}, ClientReference: ptr("order-1")}, "fast-3")
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], v.TransferID)
	requireFast(1)

	// The assets are copied now. Disabled after: 422; unknown: 404.
	_, err := e.App.Assets.SetEnabled(context.Background(), asset.USDTTRC20, false)
	require.NoError(t, err)
	r = post(body{Legs: []leg{l("a", "b", asset.BTC, 1), l("a", "b", asset.USDTTRC20, 1)}}, "fast-4")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], "legs[1]: asset USDT_TRC20 is disabled")
	r = post(body{Legs: []leg{l("a", "b", "DOGE", 1)}}, "fast-5")
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], "legs[0]")
	e.EnableAssets(asset.USDTTRC20)
	requireFast(1)

	// Two legs over two assets, platform accounts: the fast way again.
	trade := e.create(t, body{Legs: []leg{l("a", "platform:pool", asset.BTC, 100), l("a", "platform:pool", asset.USDTTRC20, 5)}})
	requireFast(2)
	require.Equal(t, trade, e.get(t, trade.TransferID))
	require.Equal(t, int64(5), e.available(t, "platform:pool", asset.USDTTRC20))
	require.Len(t, e.events(t), 2)
	require.Equal(t, 2, count(t, e, "SELECT count(*) FROM transfers"))
}

// TestAssetsUsable: transfer_assets_usable refuses (SV003) an asset that
// is unknown, disabled, or whose decimals are not the copy's.
func TestAssetsUsable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	check := func(codes []string, decimals []int32) error {
		var ok bool
		return e.App.DB.Pool.QueryRow(ctx, "SELECT transfer_assets_usable($1, $2)", codes, decimals).Scan(&ok)
	}
	require.NoError(t, check([]string{asset.BTC, asset.USDTTRC20}, []int32{8, 6}))
	for _, c := range []struct {
		codes    []string
		decimals []int32
	}{
		{[]string{asset.BTC}, []int32{7}},
		{[]string{asset.BTCLN}, []int32{8}},
		{[]string{asset.BTC, "DOGE"}, []int32{8, 8}},
	} {
		err := check(c.codes, c.decimals)
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "%v: %v", c.codes, err)
		require.Equal(t, "SV003", pe.Code, "%v", c.codes)
	}
}

// TestSameNewKeyAtOnce: one new key sent by many requests at once: their
// fast ways' claims queue on the key, one transfer is made, and every
// answer is its 201 (first or replayed) or 409 while it runs.
func TestSameNewKeyAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	raw, err := json.Marshal(body{Legs: []leg{l("a", "b", asset.BTC, 10)}})
	require.NoError(t, err)
	const n = 16
	type answer struct {
		status int
		body   string
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequest(http.MethodPost, e.URL+"/v1/transfers", bytes.NewReader(raw))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+e.RW)
			req.Header.Set("Idempotency-Key", "same-key-at-once")
			resp, err := patient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Error(err)
				return
			}
			answers[i] = answer{resp.StatusCode, string(b)}
		}()
	}
	close(start)
	wg.Wait()
	created := ""
	for _, a := range answers {
		switch a.status {
		case http.StatusCreated:
			if created == "" {
				created = a.body
			}
			require.Equal(t, created, a.body, "every 201 is the one transfer's")
		case http.StatusConflict:
		default:
			t.Fatalf("answer %d: %s", a.status, a.body)
		}
	}
	require.NotEmpty(t, created)
	require.Equal(t, 1, count(t, e, "SELECT count(*) FROM transfers"))
	require.Equal(t, int64(990), e.available(t, "a", asset.BTC))
	require.Len(t, e.events(t), 1)
}
