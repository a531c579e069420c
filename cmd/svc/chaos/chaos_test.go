package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"svc/platform/btcpay/btcpaysim"
)

// settings of a run, from the environment (make chaos sets them; make test
// runs the short defaults).
type settings struct {
	seed     uint64
	duration time.Duration // of the workload under faults
	pause    time.Duration // mean time between faults
	actors   int
	settle   time.Duration // the most the settling may take
}

func loadSettings(t *testing.T) settings {
	s := settings{seed: rand.Uint64() % 1_000_000_000, duration: 45 * time.Second, pause: 3 * time.Second, actors: 4, settle: 8 * time.Minute}
	env := func(name string, parse func(string) error) {
		if v := os.Getenv(name); v != "" {
			if err := parse(v); err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
		}
	}
	env("CHAOS_SEED", func(v string) (err error) { s.seed, err = strconv.ParseUint(v, 10, 64); return })
	env("CHAOS_DURATION", func(v string) (err error) { s.duration, err = time.ParseDuration(v); return })
	env("CHAOS_FAULT_PAUSE", func(v string) (err error) { s.pause, err = time.ParseDuration(v); return })
	env("CHAOS_ACTORS", func(v string) (err error) { s.actors, err = strconv.Atoi(v); return })
	env("CHAOS_SETTLE", func(v string) (err error) { s.settle, err = time.ParseDuration(v); return })
	return s
}

// TestChaos runs the whole service under faults and checks that nothing
// was lost or doubled (docs/reliability.md).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole service as separate processes")
	}
	// Its own server and cluster, as every scenario of this package has:
	// they all run at once.
	t.Parallel()
	s := loadSettings(t)
	// make chaos runs 30 minutes by default and make test 45 seconds: a
	// replay needs the run's own duration and pause to repeat its faults.
	replay := fmt.Sprintf("make chaos CHAOS_SEED=%d CHAOS_DURATION=%s CHAOS_FAULT_PAUSE=%s", s.seed, s.duration, s.pause)
	t.Logf("chaos seed %d (replay: %s), workload %s, a fault every ~%s", s.seed, replay, s.duration, s.pause)
	dir, err := os.MkdirTemp("", "svc-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CHAOS_KEEP") != "" {
			t.Logf("logs of the processes kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	c := startCluster(t, dir)
	v := &violations{}
	o := &oracle{c: c, v: v}
	d := newDriver(t, c, v, s.seed)
	f := newFaults(c, v, s.seed, s.pause)

	started := time.Now()
	d.waitAssets(t)
	ctx, stop := context.WithTimeout(context.Background(), s.duration)
	defer stop()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go o.watch(watchCtx, 5*time.Second)
	actors := d.run(ctx, s.actors)
	faultsDone := make(chan struct{})
	go func() { f.run(ctx); close(faultsDone) }()
	<-ctx.Done()
	<-faultsDone
	actors.Wait()
	t.Logf("workload over after %s: %s", time.Since(started).Round(time.Second), f.summary())

	// Everything is up again; the operator and the payers finish what is
	// open, and every process is left to recover by itself.
	settleStart := time.Now()
	left := d.settle(o, s.settle)
	stopWatch()
	for _, l := range left {
		v.add("after %s of settling: %s", s.settle, l)
	}
	final := context.Background()
	for i := 0; !o.books(final); i++ {
		if i == 30 {
			v.add("the final ledger check could not read the database")
			break
		}
		time.Sleep(time.Second)
	}
	nEvents := o.settledChecks(final, d, v)

	summary := fmt.Sprintf("seed %d: workload %s with %d actors, settled in %s\n  faults: %s\n  %s\n  events delivered %d (receiver saw %d deliveries), book checks %d, violations %d",
		s.seed, s.duration, s.actors, time.Since(settleStart).Round(time.Second), f.summary(), d.summary(),
		nEvents, c.recv.deliveries.Load(), o.checks, len(v.all()))
	t.Log(summary)
	_ = os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summary+"\n\nfaults:\n"+strings.Join(f.log, "\n")+"\n"), 0o644)
	if list := v.all(); len(list) > 0 {
		t.Errorf("%d invariant violations (seed %d; replay with %s):\n%s", len(list), s.seed, replay, strings.Join(list, "\n"))
		t.Logf("faults injected:\n%s", strings.Join(f.log, "\n"))
	}
}

// endInvoices plays the payers' wallets and the processor's clock for the
// deposits the driver knows: each unpaid invoice expires, and the payments
// of each paid one confirm. Every invoice carrying a deposit's orderId, not
// only one per order: a creation retried while the processor was slow can
// leave two, and the one the deposit recorded and its user paid is not
// always the newest (the first attempt's invoice can appear at the
// processor after the retry's). Settling only the newest expired that
// orphan and left the paid invoice's payments Processing for good, its
// deposit confirming (seed 161604452).
func endInvoices(sim *btcpaysim.Sim, deps []*dep) {
	known := make(map[string]bool, len(deps))
	for _, x := range deps {
		known[x.id] = true
	}
	for _, inv := range sim.Invoices() {
		if !known[inv.OrderID] {
			continue
		}
		if inv.Status == "New" && len(inv.Payments) == 0 {
			_ = sim.Expire(inv.ID)
		} else {
			_ = sim.Confirm(inv.ID)
		}
	}
}

// waitAssets waits until discovery has enabled every asset.
func (d *driver) waitAssets(t *testing.T) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, ok := d.call(context.Background(), http.MethodGet, "/v1/assets", nil, false)
		if ok && resp.status == http.StatusOK {
			var b struct {
				Assets []struct {
					Asset   string `json:"asset"`
					Enabled bool   `json:"enabled"`
				} `json:"assets"`
			}
			n := 0
			if resp.decode(&b) == nil {
				for _, a := range b.Assets {
					if a.Enabled {
						n++
					}
				}
			}
			if n == 3 {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatal("discovery did not enable BTC, BTC_LN and USDT_TRC20 within 60 s")
}

// settle plays the operator and the payers until nothing is open: every
// unpaid invoice expires, every payment confirms, every waiting withdrawal
// is approved, every USDT one sent, every live payout completed, every
// failed withdrawal released. It returns what is still open at the end.
func (d *driver) settle(o *oracle, within time.Duration) []string {
	ctx := context.Background()
	d.c.sim.DuplicateWebhooks(false)
	d.c.sim.ReleaseWebhooks(false)
	deadline := time.Now().Add(within)
	for round := 0; ; round++ {
		unanswered := d.retryUnanswered(ctx)
		d.mu.Lock()
		deps := append([]*dep(nil), d.deposits...)
		d.mu.Unlock()
		endInvoices(d.c.sim, deps)
		for _, w := range d.adminList(ctx, "") {
			switch {
			case w.Status == "pending_approval":
				d.call(ctx, http.MethodPost, "/v1/admin/withdrawals/"+w.ID+"/approve", map[string]any{"note": "chaos settling"}, true)
			case w.Status == "approved" && w.Asset == "USDT_TRC20" && w.AmountNet != nil:
				d.sendUSDT(ctx, w, fmt.Sprintf("settle-%d", round))
			case w.Status == "failed":
				d.call(ctx, http.MethodPost, "/v1/admin/withdrawals/"+w.ID+"/release",
					map[string]any{"attestation": "chaos settling: the processor cancelled the payout"}, true)
			}
		}
		d.c.tron.MineBlocks(20)
		for _, p := range d.c.sim.Payouts() {
			if p.State == "AwaitingPayment" || p.State == "InProgress" {
				_, _ = d.c.sim.CompletePayout(p.ID, "")
			}
		}
		left, err := o.unsettled(ctx)
		if unanswered > 0 {
			left = append(left, fmt.Sprintf("%d requests still unanswered", unanswered))
		}
		if err == nil && len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return left
		}
		time.Sleep(3 * time.Second)
	}
}
