package tronsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/chain"
	"svc/platform/config"
	"svc/platform/tron"
	"svc/platform/tron/tronsim"
)

const (
	alice = "TXLAQ63Xg1NAzckPwKHvzw7CSEmLMEqcdj"
	bob   = "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb"
)

func post(t *testing.T, url string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// mount serves the simulator under /tron, the way a combined simulator
// command mounts it next to the processor's paths.
func mount(t *testing.T, sim *tronsim.Sim) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/tron/", http.StripPrefix("/tron", sim))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/tron"
}

// TestControlAPI drives a mounted simulator over HTTP, as a local run does,
// and reads the result back through the service's client.
func TestControlAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := mount(t, tronsim.New())
	c, err := tron.New(config.Tron{URL: base, USDTContract: "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", Timeout: time.Second})
	require.NoError(t, err)

	status, out := post(t, base+"/sim/transfers", map[string]any{"from": alice, "to": bob, "amount": "25000000"})
	require.Equal(t, http.StatusOK, status, out)
	txid := out["txid"].(string)
	tx, err := c.Transaction(ctx, txid)
	require.NoError(t, err)
	require.True(t, tx.Succeeded())
	require.Len(t, tx.Transfers, 1)
	require.Equal(t, int64(25_000_000), tx.Transfers[0].Amount)
	require.Equal(t, bob, tx.Transfers[0].To.String())

	status, out = post(t, base+"/sim/transfers", map[string]any{"from": alice, "to": bob, "amount": 5, "success": false})
	require.Equal(t, http.StatusOK, status, out)
	tx, err = c.Transaction(ctx, out["txid"].(string))
	require.NoError(t, err)
	require.False(t, tx.Succeeded())

	status, out = post(t, base+"/sim/transfers", map[string]any{"from": alice, "to": bob, "amount": 6, "pending": true})
	require.Equal(t, http.StatusOK, status, out)
	pending := out["txid"].(string)
	tx, err = c.Transaction(ctx, pending)
	require.NoError(t, err)
	require.True(t, tx.Pending)
	status, _ = post(t, base+"/sim/confirm", map[string]any{"txid": pending})
	require.Equal(t, http.StatusOK, status)
	tx, err = c.Transaction(ctx, pending)
	require.NoError(t, err)
	require.True(t, tx.Succeeded())

	status, out = post(t, base+"/sim/balances", map[string]any{"address": bob, "trx_sun": 150_000_000, "usdt": "31000000"})
	require.Equal(t, http.StatusOK, status, out)
	b, _ := chain.ParseTronAddress(bob)
	trx, err := c.TRXBalance(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(150_000_000), trx)
	u, err := c.USDTBalance(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(31_000_000), u)

	before, err := c.LatestBlock(ctx)
	require.NoError(t, err)
	status, out = post(t, base+"/sim/blocks", map[string]any{"count": 20})
	require.Equal(t, http.StatusOK, status, out)
	after, err := c.LatestBlock(ctx)
	require.NoError(t, err)
	require.Equal(t, before.Number+20, after.Number)

	status, _ = post(t, base+"/sim/mode", map[string]any{"mode": "errors"})
	require.Equal(t, http.StatusOK, status)
	require.ErrorIs(t, c.Ping(ctx), tron.ErrUnreachable)
	status, _ = post(t, base+"/sim/mode", map[string]any{"mode": "up"})
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, c.Ping(ctx))

	resp, err := http.Get(base + "/sim/state")
	require.NoError(t, err)
	defer resp.Body.Close()
	var state map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&state))
	require.Equal(t, "up", state["mode"])
	require.Equal(t, "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", state["usdt_contract"])
}

func TestControlAPIRefusesBadInput(t *testing.T) {
	t.Parallel()
	base := mount(t, tronsim.New())
	for _, tt := range []struct {
		path string
		body map[string]any
	}{
		{"/sim/transfers", map[string]any{"from": "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c", "to": bob, "amount": 1}},
		{"/sim/transfers", map[string]any{"from": alice, "to": bob, "amount": -1}},
		{"/sim/transfers", map[string]any{"from": alice, "to": bob, "amount": "1.5"}},
		{"/sim/confirm", map[string]any{"txid": "nope"}},
		{"/sim/blocks", map[string]any{"count": 0}},
		{"/sim/balances", map[string]any{"address": "x", "usdt": 1}},
		{"/sim/mode", map[string]any{"mode": "sideways"}},
	} {
		status, out := post(t, base+tt.path, tt.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %v", tt.path, tt.body)
		require.NotEmpty(t, out["error"])
	}
}

// TestNodeShapes checks the java-tron answers a client other than ours
// would rely on: empty objects for unknown things, hex or base58 addresses
// by the visible flag, and the receipt fields of gettransactioninfobyid.
func TestNodeShapes(t *testing.T) {
	t.Parallel()
	sim := tronsim.Start(t)
	from, _ := chain.ParseTronAddress(alice)
	to, _ := chain.ParseTronAddress(bob)
	id := sim.AddUSDTTransfer("", from, to, 1_000_000, true)

	_, out := post(t, sim.URL+"/wallet/gettransactioninfobyid", map[string]any{"value": id})
	require.Equal(t, id, out["id"])
	require.Equal(t, "41a614f803b6fd780986a42c78ec9c7f77e6ded13c", out["contract_address"])
	require.Equal(t, "SUCCESS", out["receipt"].(map[string]any)["result"])
	logs := out["log"].([]any)
	require.Len(t, logs, 1)
	l := logs[0].(map[string]any)
	require.Equal(t, "a614f803b6fd780986a42c78ec9c7f77e6ded13c", l["address"])
	topics := l["topics"].([]any)
	require.Equal(t, "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef", topics[0])
	require.Equal(t, "000000000000000000000000"+from.EVMHex(), topics[1])
	require.Equal(t, "000000000000000000000000"+to.EVMHex(), topics[2])
	require.Equal(t, "00000000000000000000000000000000000000000000000000000000000f4240", l["data"])

	_, out = post(t, sim.URL+"/wallet/gettransactionbyid", map[string]any{"value": id, "visible": true})
	v := out["raw_data"].(map[string]any)["contract"].([]any)[0].(map[string]any)["parameter"].(map[string]any)["value"].(map[string]any)
	require.Equal(t, alice, v["owner_address"])
	require.Equal(t, "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t", v["contract_address"])
	_, out = post(t, sim.URL+"/wallet/gettransactionbyid", map[string]any{"value": id})
	v = out["raw_data"].(map[string]any)["contract"].([]any)[0].(map[string]any)["parameter"].(map[string]any)["value"].(map[string]any)
	require.Equal(t, from.Hex(), v["owner_address"])

	// An id that differs from the transaction's in its first byte (which
	// is random, so it may be 00 itself).
	unknown := "00" + id[2:]
	if unknown == id {
		unknown = "ff" + id[2:]
	}
	for _, path := range []string{"/wallet/gettransactionbyid", "/wallet/gettransactioninfobyid", "/walletsolidity/gettransactioninfobyid"} {
		_, out = post(t, sim.URL+path, map[string]any{"value": unknown})
		require.Empty(t, out, path)
	}
	_, out = post(t, sim.URL+"/walletsolidity/gettransactioninfobyid", map[string]any{"value": id})
	require.Empty(t, out, "not solidified yet")
	sim.MineBlocks(19)
	_, out = post(t, sim.URL+"/walletsolidity/gettransactioninfobyid", map[string]any{"value": id})
	require.Equal(t, id, out["id"])

	_, out = post(t, sim.URL+"/wallet/getaccount", map[string]any{"address": bob, "visible": true})
	require.Empty(t, out, "never activated")
}
