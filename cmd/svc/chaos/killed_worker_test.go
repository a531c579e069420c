package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/event"
	"svc/platform/btcpay/btcpaysim"
)

// TestKilledWorkerDelivery: both workers are killed with kill -9 while a
// delivery to the platform is in flight (the receiver holds it open), and
// started again. Every event is then delivered within two minutes, once,
// with a signature that verifies: the dead worker's delivery job is handed
// back by a live worker (queue.DeadWorkerRescue) instead of waiting for
// River's time-based rescue.
func TestKilledWorkerDelivery(t *testing.T) {
	// Its own cluster and server: it runs beside the other scenarios
	// once TestChaos is done.
	t.Parallel()
	c := startCluster(t, scenarioDir(t))
	v := &violations{}
	d := newDriver(t, c, v, 1)
	d.waitAssets(t)
	ctx := context.Background()

	c.recv.hold.Store(true)
	_, invoice := d.newDeposit(t, "kw")
	_, err := c.sim.Pay(invoice, btcpaysim.PayParams{Settled: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.recv.held.Load() > 0 }, time.Minute, 50*time.Millisecond,
		"a delivery reaches the receiver and is held")

	for _, w := range c.workers {
		w.Kill()
	}
	killed := time.Now()
	for _, w := range c.workers {
		require.NoError(t, w.Start())
	}
	c.recv.hold.Store(false)

	var rows []struct {
		ID     uuid.UUID
		Status string
	}
	require.Eventually(t, func() bool {
		rows = rows[:0]
		err := c.db.Bun.NewSelect().Table("outbound_events").Column("id", "status").Scan(ctx, &rows)
		if err != nil || len(rows) == 0 {
			return false
		}
		for _, r := range rows {
			if r.Status != "delivered" {
				return false
			}
		}
		return true
	}, 2*time.Minute, 250*time.Millisecond, "every event delivered within two minutes of the kill")
	t.Logf("%d events delivered %s after both workers were killed mid-delivery", len(rows), time.Since(killed).Round(time.Second))
	got := map[string]int{}
	for _, e := range c.recv.Events() {
		got[e.ID] = e.Duplicates
	}
	for _, r := range rows {
		dups, ok := got[event.PublicID(r.ID)]
		require.True(t, ok, "event %s reached the receiver", r.ID)
		require.Zero(t, dups, "event %s delivered once", r.ID)
	}
	require.Zero(t, c.recv.badSig.Load(), "every signature verifies")
	require.Empty(t, v.all())
}
