package tron_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/chain"
	"svc/platform/config"
	"svc/platform/tron"
	"svc/platform/tron/tronsim"
)

var (
	usdt  = mustAddr("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")
	alice = mustAddr("TXLAQ63Xg1NAzckPwKHvzw7CSEmLMEqcdj")
	bob   = mustAddr("T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb")
)

func mustAddr(s string) chain.TronAddress {
	a, err := chain.ParseTronAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

func newClient(t *testing.T, url, key string, timeout time.Duration) *tron.Client {
	t.Helper()
	c, err := tron.New(config.Tron{URL: url, APIKey: key, USDTContract: usdt.String(), Timeout: timeout})
	require.NoError(t, err)
	return c
}

func startSim(t *testing.T, opts ...tronsim.Option) (*tronsim.Sim, *tron.Client) {
	t.Helper()
	sim := tronsim.Start(t, append([]tronsim.Option{tronsim.WithAPIKey("test-key")}, opts...)...)
	return sim, newClient(t, sim.URL, "test-key", 2*time.Second)
}

// target is one node the read-only contract runs against: the simulator
// always, a real TronGrid when TRON_CONTRACT_URL is set.
type target struct {
	client *tron.Client
	// txid is a successful USDT transfer on that node; want, when known,
	// is the transfer it must show.
	txid   string
	want   *tron.Transfer
	holder chain.TronAddress // an address with a USDT balance
}

// runContract checks what every TRON node the service talks to must do.
func runContract(t *testing.T, tg target) {
	ctx := context.Background()

	require.NoError(t, tg.client.Ping(ctx))
	latest, err := tg.client.LatestBlock(ctx)
	require.NoError(t, err)
	solid, err := tg.client.SolidBlock(ctx)
	require.NoError(t, err)
	require.Positive(t, solid.Number)
	require.LessOrEqual(t, solid.Number, latest.Number)
	require.False(t, latest.Time.IsZero())

	tx, err := tg.client.Transaction(ctx, tg.txid)
	require.NoError(t, err)
	require.Equal(t, strings.ToLower(tg.txid), tx.ID)
	require.True(t, tx.Succeeded(), "%+v", tx)
	require.Equal(t, "TriggerSmartContract", tx.ContractType)
	require.Equal(t, tg.client.USDTContract(), tx.Contract)
	require.Positive(t, tx.BlockNumber)
	require.LessOrEqual(t, tx.BlockNumber, latest.Number)
	transfers := tx.TransfersOf(tg.client.USDTContract())
	require.NotEmpty(t, transfers)
	require.Equal(t, tx.Owner, transfers[0].From, "a direct transfer is sent by its signer")
	if tg.want != nil {
		require.Equal(t, *tg.want, transfers[0])
	}

	_, err = tg.client.Transaction(ctx, strings.Repeat("ab", 32))
	require.ErrorIs(t, err, tron.ErrNotFound)

	bal, err := tg.client.USDTBalance(ctx, tg.holder)
	require.NoError(t, err)
	require.Positive(t, bal)
	_, err = tg.client.TRXBalance(ctx, tg.holder)
	require.NoError(t, err)
}

func TestContractSimulator(t *testing.T) {
	t.Parallel()
	sim, c := startSim(t)
	txid := sim.AddUSDTTransfer("", alice, bob, 12_500_000, true)
	sim.SetUSDTBalance(bob, 12_500_000)
	runContract(t, target{client: c, txid: txid, holder: bob,
		want: &tron.Transfer{Contract: usdt, From: alice, To: bob, Amount: 12_500_000, LogIndex: 0}})
	require.Equal(t, "test-key", sim.LastAPIKey(), "the API key goes in TRON-PRO-API-KEY")
}

// TestContractTronGrid runs the same contract against a real node. Set
// TRON_CONTRACT_URL (and TRON_CONTRACT_API_KEY), TRON_CONTRACT_TXID (a
// successful USDT transfer) and TRON_CONTRACT_HOLDER (an address holding
// USDT); USDT_TRC20_CONTRACT when the node is not mainnet.
func TestContractTronGrid(t *testing.T) {
	t.Parallel()
	url := os.Getenv("TRON_CONTRACT_URL")
	if url == "" {
		t.Skip("TRON_CONTRACT_URL not set: the contract runs against the simulator only")
	}
	contract := os.Getenv("USDT_TRC20_CONTRACT")
	if contract == "" {
		contract = usdt.String()
	}
	c, err := tron.New(config.Tron{URL: url, APIKey: os.Getenv("TRON_CONTRACT_API_KEY"), USDTContract: contract, Timeout: 20 * time.Second})
	require.NoError(t, err)
	holder, err := chain.ParseTronAddress(os.Getenv("TRON_CONTRACT_HOLDER"))
	require.NoError(t, err, "TRON_CONTRACT_HOLDER")
	runContract(t, target{client: c, txid: os.Getenv("TRON_CONTRACT_TXID"), holder: holder})
}

func TestTransactionStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim, c := startSim(t)

	t.Run("Reverted", func(t *testing.T) {
		id := sim.AddUSDTTransfer("", alice, bob, 5, false)
		tx, err := c.Transaction(ctx, id)
		require.NoError(t, err)
		require.False(t, tx.Succeeded())
		require.True(t, tx.Failed)
		require.Equal(t, "REVERT", tx.Result)
		require.Equal(t, "REVERT", tx.ContractRet)
		require.Equal(t, "REVERT opcode executed", tx.ResMessage)
		require.Empty(t, tx.Transfers, "a reverted transaction emits no events")
	})

	t.Run("PendingThenConfirmed", func(t *testing.T) {
		id := sim.AddTx(tronsim.Tx{Pending: true, Logs: []tronsim.Log{{From: alice, To: bob, Amount: 7}}})
		tx, err := c.Transaction(ctx, id)
		require.NoError(t, err)
		require.True(t, tx.Pending)
		require.False(t, tx.Succeeded())
		require.Empty(t, tx.Transfers)
		require.Zero(t, tx.Confirmations(1<<40))

		require.True(t, sim.Confirm(id))
		tx, err = c.Transaction(ctx, id)
		require.NoError(t, err)
		require.False(t, tx.Pending)
		require.True(t, tx.Succeeded())
		latest, _ := sim.Head()
		require.Equal(t, latest, tx.BlockNumber)
		require.Equal(t, int64(1), tx.Confirmations(latest))
	})

	t.Run("Solidified", func(t *testing.T) {
		id := sim.AddUSDTTransfer("", alice, bob, 9, true)
		tx, err := c.Transaction(ctx, id)
		require.NoError(t, err)
		solid, err := c.SolidBlock(ctx)
		require.NoError(t, err)
		require.Greater(t, tx.BlockNumber, solid.Number, "fresh: not final yet")
		sim.MineBlocks(19)
		solid, err = c.SolidBlock(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, tx.BlockNumber, solid.Number, "final after the solid lag")
		require.Equal(t, int64(20), tx.Confirmations(solid.Number+19))
	})

	t.Run("SeveralTransfersAndTokens", func(t *testing.T) {
		other := mustAddr("TXLAQ63Xg1NAzckPwKHvzw7CSEmLMEqcdj")
		id := sim.AddTx(tronsim.Tx{Owner: alice, Logs: []tronsim.Log{
			{From: alice, To: bob, Amount: 1_000_000},
			{Contract: other, From: alice, To: bob, Amount: 99},
			{From: alice, To: alice, Amount: 2},
		}})
		tx, err := c.Transaction(ctx, id)
		require.NoError(t, err)
		require.Len(t, tx.Transfers, 3)
		got := tx.TransfersOf(usdt)
		require.Equal(t, []tron.Transfer{
			{Contract: usdt, From: alice, To: bob, Amount: 1_000_000, LogIndex: 0},
			{Contract: usdt, From: alice, To: alice, Amount: 2, LogIndex: 2},
		}, got)
		require.Equal(t, []tron.Transfer{{Contract: other, From: alice, To: bob, Amount: 99, LogIndex: 1}}, tx.TransfersOf(other))
	})

	t.Run("TxIDForms", func(t *testing.T) {
		id := sim.AddUSDTTransfer("", alice, bob, 3, true)
		for _, form := range []string{strings.ToUpper(id), "0x" + id} {
			tx, err := c.Transaction(ctx, form)
			require.NoError(t, err, form)
			require.Equal(t, id, tx.ID)
		}
	})

	t.Run("BadTxIDIsRefusedWithoutACall", func(t *testing.T) {
		before := sim.Calls("/wallet/gettransactionbyid")
		for _, bad := range []string{"", "abc", strings.Repeat("z", 64), strings.Repeat("a", 65)} {
			_, err := c.Transaction(ctx, bad)
			require.ErrorIs(t, err, tron.ErrRefused, bad)
		}
		require.Equal(t, before, sim.Calls("/wallet/gettransactionbyid"))
	})
}

func TestBalances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim, c := startSim(t)

	trx, err := c.TRXBalance(ctx, alice)
	require.NoError(t, err)
	require.Zero(t, trx, "never activated")

	sim.SetTRXBalance(alice, 0)
	trx, err = c.TRXBalance(ctx, alice)
	require.NoError(t, err)
	require.Zero(t, trx, "activated, empty: the node leaves balance out")

	sim.SetTRXBalance(alice, 250_000_000)
	trx, err = c.TRXBalance(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, int64(250_000_000), trx)

	u, err := c.USDTBalance(ctx, alice)
	require.NoError(t, err)
	require.Zero(t, u)
	sim.SetUSDTBalance(alice, 1_234_567_890_123)
	u, err = c.USDTBalance(ctx, alice)
	require.NoError(t, err)
	require.Equal(t, int64(1_234_567_890_123), u)

	_, err = c.TokenBalance(ctx, bob, alice) // bob is not a contract
	require.ErrorIs(t, err, tron.ErrRefused)
}

// TestFailureClassification checks that every way the node can fail is
// reported as unreachable (try again) or refused (do not), and that the
// client recovers when the node comes back.
func TestFailureClassification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		mode tronsim.Mode
		want error
	}{
		{name: "5xx", mode: tronsim.Errors, want: tron.ErrUnreachable},
		{name: "dropped connection", mode: tronsim.Drop, want: tron.ErrUnreachable},
		{name: "no answer", mode: tronsim.Hang, want: tron.ErrUnreachable},
		{name: "rate limited", mode: tronsim.RateLimited, want: tron.ErrUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sim := tronsim.Start(t)
			// Long enough for the first answers of a fresh simulator on a
			// loaded machine; a hanging node costs the test this twice.
			c := newClient(t, sim.URL, "", 2*time.Second)
			require.NoError(t, c.Ping(ctx))
			sim.SetMode(tt.mode)
			err := c.Ping(ctx)
			require.ErrorIs(t, err, tt.want)
			require.NotErrorIs(t, err, tron.ErrRefused)
			_, err = c.USDTBalance(ctx, alice)
			require.ErrorIs(t, err, tt.want)
			sim.SetMode(tronsim.Up)
			require.NoError(t, c.Ping(ctx))
		})
	}

	t.Run("wrong API key", func(t *testing.T) {
		t.Parallel()
		sim := tronsim.Start(t, tronsim.WithAPIKey("right"))
		err := newClient(t, sim.URL, "wrong", time.Second).Ping(ctx)
		require.ErrorIs(t, err, tron.ErrRefused)
		require.NotErrorIs(t, err, tron.ErrUnreachable)
		require.Contains(t, err.Error(), "HTTP 401")
		require.NotContains(t, err.Error(), "wrong", "the key never appears in errors")
	})

	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		sim := tronsim.Start(t)
		url := sim.URL
		c := newClient(t, "http://127.0.0.1:1", "", time.Second)
		require.ErrorIs(t, c.Ping(ctx), tron.ErrUnreachable, url)
	})

	t.Run("node error body", func(t *testing.T) {
		t.Parallel()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"Error":"class java.lang.IllegalArgumentException : bad"}`))
		})}
		url := serve(t, srv)
		err := newClient(t, url, "", time.Second).Ping(ctx)
		require.ErrorIs(t, err, tron.ErrRefused)
		require.Contains(t, err.Error(), "IllegalArgumentException")
	})

	t.Run("success body that does not parse", func(t *testing.T) {
		t.Parallel()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`<html>gateway</html>`))
		})}
		url := serve(t, srv)
		require.ErrorIs(t, newClient(t, url, "", time.Second).Ping(ctx), tron.ErrUnreachable)
	})
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := tron.New(config.Tron{URL: "ftp://x", USDTContract: usdt.String()})
	require.Error(t, err)
	_, err = tron.New(config.Tron{URL: "http://x", USDTContract: "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c"})
	require.Error(t, err)
}
