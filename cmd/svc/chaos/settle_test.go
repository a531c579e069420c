package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
)

// TestEndInvoicesSettlesThePaidInvoiceOfARetriedCreation is the settling
// of seed 161604452: a creation whose first attempt timed out while the
// processor was slow, and whose retry created the invoice the deposit
// recorded before the first attempt's own appeared at the processor. The
// deposit's invoice, paid, is then the older of two with its orderId; the
// newer is an orphan nobody was shown. Settling must confirm the paid one
// (and expire the orphan), or the deposit stays confirming.
func TestEndInvoicesSettlesThePaidInvoiceOfARetriedCreation(t *testing.T) {
	sim := btcpaysim.Start(t, btcpaysim.Options{TickEvery: -1})
	client, err := btcpay.New(btcpay.Options{URL: sim.URL(), APIKey: sim.APIKey(), StoreID: sim.StoreID(), Timeout: 5 * time.Second})
	require.NoError(t, err)
	create := func(orderID string) string {
		t.Helper()
		a := btcpay.MustAmount("0.01")
		inv, err := client.CreateInvoice(context.Background(), btcpay.CreateInvoiceParams{OrderID: orderID, Amount: &a,
			Currency: "BTC", PaymentMethod: btcpay.MethodBTCChain, ExpirationMinutes: 60, MonitoringMinutes: 1440,
			SpeedPolicy: btcpay.SpeedMedium})
		require.NoError(t, err)
		return inv.ID
	}

	retried := uuid.NewString()
	own := create(retried)    // the retry's invoice: the deposit records it, its user pays it
	orphan := create(retried) // the first attempt's, appearing after it
	_, err = sim.Pay(own, btcpaysim.PayParams{})
	require.NoError(t, err)
	unpaid := uuid.NewString()
	left := create(unpaid)
	stranger := create(uuid.NewString()) // not a deposit the driver knows

	endInvoices(sim, []*dep{{id: retried, asset: "BTC"}, {id: unpaid, asset: "BTC"}})

	status := func(id string) string {
		t.Helper()
		inv, ok := sim.Invoice(id)
		require.True(t, ok)
		return inv.Status
	}
	inv, _ := sim.Invoice(own)
	require.Len(t, inv.Payments, 1)
	require.Equal(t, "Settled", inv.Payments[0].Status, "the paid invoice's payment confirms")
	require.Equal(t, "Settled", status(own))
	require.Equal(t, "Expired", status(orphan))
	require.Equal(t, "Expired", status(left))
	require.Equal(t, "New", status(stranger))
}
