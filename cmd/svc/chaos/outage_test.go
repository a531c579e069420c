package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/btcpay/btcpaysim"
)

// TestDepositPaidDuringAnOutageSettlesOnRecovery: a deposit is paid while
// PostgreSQL is down, so the processor's webhook is refused and its next
// retry is a minute away; the periodic deposit poll is set to ten minutes.
// Once the server is back, the deposit is credited within 10 seconds, and
// not by a webhook. Two things run the catch-up passes at once: each worker
// notices the recovery through its liveness session
// (queue.DeadWorkerRescue.OnReconnect), and River's leader, elected again
// after the restart, starts the periodic passes with RunOnStart. Either
// alone passes this test; it checks the outcome the operator relies on.
func TestDepositPaidDuringAnOutageSettlesOnRecovery(t *testing.T) {
	// Its own cluster and server: it runs beside the other scenarios
	// once TestChaos is done.
	t.Parallel()
	c := startCluster(t, scenarioDir(t), "DEPOSIT_POLL_INTERVAL=10m")
	d := newDriver(t, c, &violations{}, 1)
	d.waitAssets(t)
	ctx := context.Background()
	depositID, invoice := d.newDeposit(t, "outage")

	c.pg.Crash()
	crashed := time.Now()
	_, err := c.sim.Pay(invoice, btcpaysim.PayParams{Settled: true})
	require.NoError(t, err)
	time.Sleep(15 * time.Second) // past the webhook's first retry (10 s), which fails too
	c.pg.Start()
	back := time.Now()

	status := func() string {
		var s string
		if err := c.db.Bun.NewSelect().Table("deposits").Column("status").Where("id = ?", depositID).Scan(ctx, &s); err != nil {
			return ""
		}
		return s
	}
	require.Eventually(t, func() bool { return status() == "settled" }, 10*time.Second, 100*time.Millisecond,
		"the deposit paid during the outage settles within 10 s of recovery (status %q)", status())
	settled := time.Now()
	t.Logf("settled %s after the database was back", settled.Sub(back).Round(100*time.Millisecond))
	for _, dl := range c.sim.Deliveries() {
		require.False(t, dl.At.After(crashed) && dl.At.Before(settled) && dl.Status >= 200 && dl.Status < 300,
			"no processor webhook was accepted since the crash (%s %d at %s): the catch-up poll settled it", dl.Type, dl.Status, dl.At)
	}
}
