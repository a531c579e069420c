package main

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/spf13/cobra"

	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/platformsim"
	"svc/platform/tron/tronsim"
)

// tronPrefix is where the TRON node simulator is mounted on the simulator's
// listener; platformPrefix is where the platform's webhook receiver is.
const (
	tronPrefix     = "/tron"
	platformPrefix = "/platform"
)

// newSimulatorCmd runs the BTCPay Server simulator, with the TRON node
// simulator mounted under /tron, for local runs (make run). It is hidden:
// it is not part of a deployment.
func newSimulatorCmd() *cobra.Command {
	var (
		addr, network, apiKey, storeID, hookURL, hookSecret, platformSecret string
		autoComplete, printEnv, withTron                                    bool
	)
	port := os.Getenv("SIM_PORT")
	if port == "" {
		port = "8090"
	}
	cmd := &cobra.Command{
		Use:   "simulator",
		Short: "Run the BTCPay Server and TronGrid simulator: a test double for local runs and tests, never for real money",
		Long: "Serves BTCPay's Greenfield API (and, under /tron, a TRON node's API) from memory, sends signed\n" +
			"webhooks, and is driven through its control API under /_sim/ (see docs/simulator.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base := "http://" + addr
			env := [][2]string{
				{"BTCPAY_URL", base}, {"BTCPAY_API_KEY", apiKey}, {"BTCPAY_STORE_ID", storeID},
				{"USDT_POOL_ADDRESSES", strings.Join(btcpaysim.DefaultTronPool(20), ",")},
			}
			if withTron {
				// The hot wallet USDT withdrawals are sent from: a fixed
				// address the simulator's node knows nothing special about;
				// the operator's transfer is recorded with POST
				// /tron/sim/transfers (docs/withdrawals.md).
				env = append(env, [2]string{"TRONGRID_URL", base + tronPrefix}, [2]string{"TRON_HOT_WALLET", devHotWallet()})
			}
			if platformSecret != "" {
				env = append(env, [2]string{"PLATFORM_WEBHOOK_URL", base + platformPrefix + "/webhooks"},
					[2]string{"PLATFORM_WEBHOOK_SECRET", platformSecret})
			}
			out := cmd.OutOrStdout()
			if printEnv {
				for _, kv := range env {
					fmt.Fprintf(out, "export %s='%s'\n", kv[0], kv[1])
				}
				return nil
			}
			o := btcpaysim.Options{Network: network, APIKey: apiKey, StoreID: storeID, WebhookURL: hookURL,
				WebhookSecret: hookSecret, AutoCompletePayouts: autoComplete,
				Log: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))}
			o.Mounts = map[string]http.Handler{}
			if withTron {
				node := tronsim.New()
				// The local hot wallet starts with 1,000 TRX of gas, above the
				// default TRX_ALERT_THRESHOLD, so a fresh run reconciles clean
				// (the /tron/sim control API changes it).
				if hot, err := chain.ParseTronAddress(devHotWallet()); err == nil {
					node.SetTRXBalance(hot, 1_000_000_000)
				}
				o.Mounts[tronPrefix+"/"] = http.StripPrefix(tronPrefix, node)
				o.OnUSDTPayment = mirrorOnTron(node)
			}
			if platformSecret != "" {
				o.Mounts[platformPrefix+"/"] = http.StripPrefix(platformPrefix, platformsim.New(platformSecret))
			}
			sim, err := btcpaysim.New(o)
			if err != nil {
				return err
			}
			if err := sim.Listen(addr); err != nil {
				return fmt.Errorf("simulator: listen on %s: %w", addr, err)
			}
			fmt.Fprintf(out, "simulator listening on %s (network %s)\n", sim.URL(), sim.Network())
			for _, kv := range env {
				fmt.Fprintf(out, "  %s=%s\n", kv[0], kv[1])
			}
			fmt.Fprintf(out, "  webhooks to %s\n", orNone(hookURL))
			fmt.Fprintf(out, "control API: %s/_sim/  (docs/simulator.md)\n", sim.URL())
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return sim.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:"+port, "listen address (host:port; default port from SIM_PORT)")
	f.StringVar(&network, "network", "regtest", "Bitcoin network of addresses and BOLT11 invoices: mainnet, testnet, signet or regtest")
	f.StringVar(&apiKey, "api-key", "simulator-api-key", "the Greenfield API key the simulator accepts")
	f.StringVar(&storeID, "store-id", "SimulatorStore", "the simulated store's id")
	f.StringVar(&hookURL, "webhook-url", "", "where to send signed webhooks (the service's /webhooks/processor)")
	f.StringVar(&hookSecret, "webhook-secret", "", "the webhook signing secret (PROCESSOR_WEBHOOK_SECRET)")
	f.BoolVar(&autoComplete, "auto-complete-payouts", false, "complete approved payouts at once, like an instant payout processor")
	f.BoolVar(&withTron, "tron", true, "also serve the TRON node simulator under /tron")
	f.StringVar(&platformSecret, "platform-secret", "", "also act as the platform's webhook receiver under /platform, verifying with this secret (PLATFORM_WEBHOOK_SECRET)")
	f.BoolVar(&printEnv, "print-env", false, "print the service's settings for this simulator as shell exports, and exit")
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// mirrorOnTron records every USDT payment the BTCPay simulator sees as a
// Transfer on the TRON node simulator, and credits the pool address, so
// that the two agree for reconciliation.
func mirrorOnTron(node *tronsim.Sim) func(btcpaysim.USDTTransfer) {
	var mu sync.Mutex
	balances := map[chain.TronAddress]int64{}
	return func(tr btcpaysim.USDTTransfer) {
		to, err := chain.ParseTronAddress(tr.To)
		if err != nil {
			return
		}
		amount, err := btcpay.MustAmount(tr.Amount).Units(6)
		if err != nil {
			return
		}
		var payer [20]byte
		_, _ = rand.Read(payer[:])
		node.AddUSDTTransfer(tr.TxID, chain.TronAddress(payer), to, amount, true)
		mu.Lock()
		defer mu.Unlock()
		balances[to] += amount
		node.SetUSDTBalance(to, balances[to])
	}
}

// devHotWallet is the TRON hot wallet of a local run: a fixed, valid
// address derived from a label, owned by nobody.
func devHotWallet() string {
	h := sha256.Sum256([]byte("svc simulator hot wallet"))
	return base58.CheckEncode(h[:20], 0x41)
}
