package btcpay_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcutil"
	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/btcsuite/btcd/chaincfg"
	"github.com/google/uuid"
	"github.com/lightningnetwork/lnd/zpay32"
	"github.com/stretchr/testify/require"

	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
)

// The contract suite runs the client against the simulator always, and
// against a real BTCPay Server when BTCPAY_TEST_URL, BTCPAY_TEST_API_KEY
// and BTCPAY_TEST_STORE_ID are set (BTCPAY_TEST_NETWORK names its network,
// regtest by default). Use a regtest or testnet store without an automated
// payout processor: the suite creates approved payouts and cancels them.
// Every request and response is checked against BTCPay's templates, so
// the simulator's fidelity is checked against both the templates and, when
// given, the real thing.

type target struct {
	name   string
	client *btcpay.Client
	rec    *recorder
	sim    *btcpaysim.Sim // nil for a real server
	net    *chaincfg.Params
	url    string
	key    string
	store  string
}

func targets(t *testing.T) []target {
	out := []target{simTarget(t, btcpaysim.Options{})}
	u, k, s := os.Getenv("BTCPAY_TEST_URL"), os.Getenv("BTCPAY_TEST_API_KEY"), os.Getenv("BTCPAY_TEST_STORE_ID")
	if u != "" && k != "" && s != "" {
		network := os.Getenv("BTCPAY_TEST_NETWORK")
		if network == "" {
			network = "regtest"
		}
		net, err := btcpaysim.NetParams(network)
		require.NoError(t, err)
		out = append(out, newTarget(t, "real", u, k, s, net, nil))
	} else {
		out = append(out, target{name: "real"})
	}
	return out
}

func simTarget(t *testing.T, o btcpaysim.Options) target {
	t.Helper()
	sim := btcpaysim.Start(t, o)
	net, err := btcpaysim.NetParams(sim.Network())
	require.NoError(t, err)
	return newTarget(t, "sim", sim.URL(), sim.APIKey(), sim.StoreID(), net, sim)
}

func newTarget(t *testing.T, name, url, key, store string, net *chaincfg.Params, sim *btcpaysim.Sim) target {
	t.Helper()
	rec := newRecorder(t, url)
	c, err := btcpay.New(btcpay.Options{URL: url, APIKey: key, StoreID: store, Timeout: 10 * time.Second,
		HTTPClient: &http.Client{Transport: rec}})
	require.NoError(t, err)
	return target{name: name, client: c, rec: rec, sim: sim, net: net, url: url, key: key, store: store}
}

func (tg target) has(t *testing.T, method string) bool {
	t.Helper()
	ms, err := tg.client.StorePaymentMethods(context.Background(), true)
	require.NoError(t, err)
	for _, m := range ms {
		if btcpay.SameMethod(m.PaymentMethodID, method) && m.Enabled {
			return true
		}
	}
	return false
}

func freshAddress(t *testing.T, net *chaincfg.Params) string {
	b := make([]byte, 20)
	_, err := rand.Read(b)
	require.NoError(t, err)
	a, err := btcutil.NewAddressWitnessPubKeyHash(b, net)
	require.NoError(t, err)
	return a.EncodeAddress()
}

func TestContract(t *testing.T) {
	t.Parallel()
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			if tg.client == nil {
				t.Skip("set BTCPAY_TEST_URL, BTCPAY_TEST_API_KEY and BTCPAY_TEST_STORE_ID to run the suite against a real BTCPay Server")
			}
			contractSuite(t, tg)
		})
	}
}

// invoiceWithMethod creates an invoice of amount in currency, to be paid
// by method alone and expiring after minutes, and returns it with the one
// payment method the server lists for it.
func invoiceWithMethod(t *testing.T, c *btcpay.Client, amount, currency, method string, minutes int) (btcpay.Invoice, btcpay.InvoicePayMethod) {
	t.Helper()
	ctx := context.Background()
	amt := btcpay.MustAmount(amount)
	inv, err := c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: uuid.NewString(), Amount: &amt, Currency: currency,
		PaymentMethod: method, ExpirationMinutes: minutes})
	require.NoError(t, err)
	pms, err := c.InvoicePaymentMethods(ctx, inv.ID, true)
	require.NoError(t, err)
	require.Len(t, pms, 1)
	return inv, pms[0]
}

func contractSuite(t *testing.T, tg target) {
	ctx := context.Background()
	c := tg.client

	t.Run("ServerInfo", func(t *testing.T) {
		info, err := c.ServerInfo(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, info.Version)
		require.Contains(t, info.SupportedPaymentMethods, btcpay.MethodBTCChain)
	})

	t.Run("StorePaymentMethods", func(t *testing.T) {
		ms, err := c.StorePaymentMethods(ctx, true)
		require.NoError(t, err)
		require.True(t, tg.has(t, btcpay.MethodBTCChain), "the store needs BTC-CHAIN: %+v", ms)
		all, err := c.StorePaymentMethods(ctx, false)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(all), len(ms))
	})

	t.Run("OnChainInvoice", func(t *testing.T) {
		order := uuid.NewString()
		amt := btcpay.MustAmount("0.00012345")
		inv, err := c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: order, Amount: &amt, Currency: "BTC",
			PaymentMethod: btcpay.MethodBTCChain, ExpirationMinutes: 60, MonitoringMinutes: 1440, SpeedPolicy: btcpay.SpeedMedium,
			Metadata: map[string]any{"externalUserId": "alice"}})
		require.NoError(t, err)
		require.NotEmpty(t, inv.ID)
		require.Equal(t, tg.store, inv.StoreID)
		require.Equal(t, order, inv.OrderID())
		require.Equal(t, "alice", inv.Metadata.String("externalUserId"))
		require.Equal(t, btcpay.InvoiceNew, inv.Status)
		require.Equal(t, btcpay.AdditionalNone, inv.AdditionalStatus)
		require.Equal(t, "Standard", inv.Type)
		require.Zero(t, inv.Amount.Cmp(amt), "amount %s", inv.Amount)
		require.Equal(t, "BTC", inv.Currency)
		require.Equal(t, 60*time.Minute, inv.ExpirationTime.Sub(inv.CreatedTime.Time))
		require.Equal(t, 1440*time.Minute, inv.MonitoringExpiration.Sub(inv.ExpirationTime.Time))
		require.Equal(t, []string{btcpay.MethodBTCChain}, inv.Checkout.PaymentMethods)
		require.Equal(t, btcpay.SpeedMedium, inv.Checkout.SpeedPolicy)

		got, err := c.GetInvoice(ctx, inv.ID)
		require.NoError(t, err)
		require.Equal(t, inv.ID, got.ID)
		require.Equal(t, order, got.OrderID())

		list, err := c.InvoicesByOrderID(ctx, order)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, inv.ID, list[0].ID)
		none, err := c.InvoicesByOrderID(ctx, uuid.NewString())
		require.NoError(t, err)
		require.Empty(t, none)

		pms, err := c.InvoicePaymentMethods(ctx, inv.ID, true)
		require.NoError(t, err)
		require.Len(t, pms, 1)
		pm := pms[0]
		require.Equal(t, btcpay.MethodBTCChain, pm.PaymentMethodID)
		require.Equal(t, "BTC", pm.Currency)
		addr, err := btcutil.DecodeAddress(pm.Destination, tg.net)
		require.NoError(t, err)
		require.True(t, addr.IsForNet(tg.net), "address %s is for another network", pm.Destination)
		units, err := pm.Due.Units(8)
		require.NoError(t, err)
		require.EqualValues(t, 12345, units)
		require.Empty(t, pm.Payments)

		// Every invoice gets its own address.
		inv2, err := c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: uuid.NewString(), Amount: &amt, Currency: "BTC",
			PaymentMethod: btcpay.MethodBTCChain})
		require.NoError(t, err)
		pms2, err := c.InvoicePaymentMethods(ctx, inv2.ID, false)
		require.NoError(t, err)
		require.NotEqual(t, pm.Destination, pms2[0].Destination)
	})

	t.Run("TopUpInvoice", func(t *testing.T) {
		inv, err := c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: uuid.NewString(), Currency: "BTC",
			PaymentMethod: btcpay.MethodBTCChain, ExpirationMinutes: 30})
		require.NoError(t, err)
		require.Equal(t, "TopUp", inv.Type)
		require.True(t, inv.Amount.IsZero())
	})

	t.Run("LightningInvoice", func(t *testing.T) {
		if !tg.has(t, btcpay.MethodBTCLN) {
			t.Skip("the store has no BTC-LN")
		}
		inv, pm := invoiceWithMethod(t, c, "0.00001000", "BTC", btcpay.MethodBTCLN, 30)
		require.Equal(t, btcpay.MethodBTCLN, pm.PaymentMethodID)
		bolt, err := zpay32.Decode(pm.Destination, tg.net)
		require.NoError(t, err, "BOLT11 %s", pm.Destination)
		require.NotNil(t, bolt.MilliSat)
		require.EqualValues(t, 1_000_000, *bolt.MilliSat)
		require.WithinDuration(t, inv.ExpirationTime.Time, bolt.Timestamp.Add(bolt.Expiry()), 2*time.Minute)
	})

	t.Run("USDTInvoice", func(t *testing.T) {
		if !tg.has(t, btcpay.MethodUSDTTron) {
			t.Skip("the store has no USDT-TRON")
		}
		_, pm := invoiceWithMethod(t, c, "12.5", "USDt", btcpay.MethodUSDTTron, 60)
		require.True(t, btcpay.SameMethod(btcpay.MethodUSDTTron, pm.PaymentMethodID))
		payload, version, err := base58.CheckDecode(pm.Destination)
		require.NoError(t, err)
		require.EqualValues(t, 0x41, version)
		require.Len(t, payload, 20)
		require.True(t, strings.HasPrefix(pm.Destination, "T"))
		units, err := pm.Due.Units(6)
		require.NoError(t, err)
		require.EqualValues(t, 12_500_000, units)
	})

	t.Run("UnknownInvoice", func(t *testing.T) {
		_, err := c.GetInvoice(ctx, "NoSuchInvoice1234567")
		require.ErrorIs(t, err, btcpay.ErrNotFound)
		require.ErrorIs(t, err, btcpay.ErrRefused)
		var re *btcpay.RefusedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "invoice-not-found", re.Code)
		_, err = c.GetPayout(ctx, "NoSuchPayout1234567")
		require.ErrorIs(t, err, btcpay.ErrNotFound)
	})

	t.Run("PayoutLifecycle", func(t *testing.T) {
		wid := uuid.NewString()
		amt := btcpay.MustAmount("0.0001")
		dest := freshAddress(t, tg.net)
		p, err := c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: wid, Destination: dest, Amount: &amt,
			PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
		require.NoError(t, err)
		require.NotEmpty(t, p.ID)
		require.Equal(t, wid, p.WithdrawalID())
		require.Equal(t, dest, p.Destination)
		require.Equal(t, btcpay.MethodBTCChain, p.PayoutMethodID)
		require.Nil(t, p.PullPaymentID)
		require.False(t, p.Date.IsZero())

		got, err := c.GetPayout(ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, btcpay.PayoutAwaitingPayment, got.State)
		require.NotNil(t, got.PayoutAmount)
		require.Zero(t, got.PayoutAmount.Cmp(amt))
		require.Zero(t, got.OriginalAmount.Cmp(amt))

		found, err := c.PayoutsByWithdrawalID(ctx, wid, time.Time{})
		require.NoError(t, err)
		require.Len(t, found, 1)
		require.Equal(t, p.ID, found[0].ID)

		require.NoError(t, c.CancelPayout(ctx, p.ID))
		got, err = c.GetPayout(ctx, p.ID)
		require.NoError(t, err)
		require.Equal(t, btcpay.PayoutCancelled, got.State)
		open, err := c.ListPayouts(ctx, false)
		require.NoError(t, err)
		for _, o := range open {
			require.NotEqual(t, p.ID, o.ID, "a cancelled payout is listed without includeCancelled")
		}
		found, err = c.PayoutsByWithdrawalID(ctx, wid, time.Time{})
		require.NoError(t, err)
		require.Len(t, found, 1)
	})

	t.Run("DuplicateDestination", func(t *testing.T) {
		amt := btcpay.MustAmount("0.0002")
		dest := freshAddress(t, tg.net)
		first, err := c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: dest,
			Amount: &amt, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.CancelPayout(context.Background(), first.ID) })
		_, err = c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: dest,
			Amount: &amt, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
		var re *btcpay.RefusedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "duplicate-destination", re.Code)
		require.False(t, errors.Is(err, btcpay.ErrUnreachable))
	})

	t.Run("InvalidDestination", func(t *testing.T) {
		amt := btcpay.MustAmount("0.0002")
		_, err := c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: "not-an-address",
			Amount: &amt, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
		require.ErrorIs(t, err, btcpay.ErrRefused)
	})

	t.Run("Wallet", func(t *testing.T) {
		ov, err := c.WalletOverview(ctx)
		require.NoError(t, err)
		require.False(t, ov.Balance.IsNeg())
		rate, err := c.FeeRate(ctx, 0)
		require.NoError(t, err)
		require.False(t, rate.IsNeg())
		_, err = c.FeeRate(ctx, 2)
		require.NoError(t, err)
		_, err = c.WalletTransactions(ctx, btcpay.WalletTransactionsParams{Limit: 10})
		require.NoError(t, err)
		_, err = c.WalletTransactions(ctx, btcpay.WalletTransactionsParams{Statuses: []string{btcpay.TxConfirmed}, Skip: 1, Limit: 5})
		require.NoError(t, err)
	})

	t.Run("LightningBalance", func(t *testing.T) {
		if !tg.has(t, btcpay.MethodBTCLN) {
			t.Skip("the store has no BTC-LN")
		}
		b, err := c.LightningBalance(ctx)
		require.NoError(t, err)
		require.NotNil(t, b.Offchain)
	})

	t.Run("WrongKey", func(t *testing.T) {
		bad, err := btcpay.New(btcpay.Options{URL: tg.url, APIKey: "0000000000000000000000000000000000000000", StoreID: tg.store,
			HTTPClient: &http.Client{Transport: tg.rec}})
		require.NoError(t, err)
		_, err = bad.StorePaymentMethods(ctx, true)
		var re *btcpay.RefusedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, http.StatusUnauthorized, re.Status)
	})

	t.Run("OtherStore", func(t *testing.T) {
		other, err := btcpay.New(btcpay.Options{URL: tg.url, APIKey: tg.key, StoreID: "NoSuchStore123456789",
			HTTPClient: &http.Client{Transport: tg.rec}})
		require.NoError(t, err)
		_, err = other.StorePaymentMethods(ctx, true)
		var re *btcpay.RefusedError
		require.ErrorAs(t, err, &re)
		require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, re.Status)
	})

	if tg.sim != nil {
		t.Run("SimulatedPaymentsAndWebhooks", func(t *testing.T) { simulatedFlows(t, tg) })
	}

	// The suite exercised every operation the client has.
	seen := tg.rec.seen()
	for _, op := range []string{"ServerInfo_GetServerInfo", "StorePaymentMethods_GetStorePaymentMethods",
		"Invoices_CreateInvoice", "Invoices_GetInvoice", "Invoices_GetInvoices", "Invoices_GetInvoicePaymentMethods",
		"Payouts_CreatePayoutThroughStore", "GetStorePayout", "PullPayments_GetStorePayouts", "PullPayments_CancelPayout",
		"StoreOnChainWallets_ShowOnChainWalletOverview", "StoreOnChainWallets_GetOnChainFeeRate",
		"StoreOnChainWallets_ShowOnChainWalletTransactions"} {
		require.Positive(t, seen[op], "operation %s was not exercised", op)
	}
}
