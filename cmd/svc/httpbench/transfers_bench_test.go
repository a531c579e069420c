package httpbench

import (
	"fmt"
	"testing"
	"time"

	"svc/platform/dbtest"
)

// BenchmarkHTTPTransfers: one-leg user-to-user transfers (POST
// /v1/transfers between two of 10,000 funded users) from 32 clients in a
// closed loop for 10 s, each sending its next request when its last is
// answered as pgbench's clients do, against pgbench TPC-B at 32 clients
// run right before it on the same server (docs/performance.md, "Transfers,
// escrow holds and the hot account"; target: at least 50% of TPC-B).
func BenchmarkHTTPTransfers(b *testing.B) {
	s := loadSettings(b, settings{users: 10_000, warmup: 5 * time.Second})
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
	c := startCluster(b)
	c.fund(s.users, 10_000_000_000)
	g := newTargets(c.apiURL, c.key, s.users)
	attack(g, transfers, 50, s.warmup, nil)
	var ratios []float64
	for round := 1; round <= 2; round++ {
		tpcb := dbtest.PgbenchTPS(b, 32, 10*time.Second)
		closed := closedLoop(g, transfers, 32, 10*time.Second)
		ratio := 0.0 // without LEDGER_PGBENCH (scripts/bench.sh sets it), no reference
		if tpcb > 0 {
			ratio = 100 * float64(closed.rate) / tpcb
		}
		ratios = append(ratios, ratio)
		logf("transfers, 32 clients, closed loop, 10 s, round %d: %d/s, p50 %.2f ms, p99 %.2f ms, not 2xx %d %s; TPC-B right before: %.0f tps; %.0f%% of TPC-B",
			round, closed.rate, ms(closed.all.quantile(0.5)), ms(closed.all.quantile(0.99)), closed.all.failed(), closed.all.failures(), tpcb, ratio)
		if closed.all.failed() != 0 {
			b.Errorf("transfers: %d answers were not a 2xx: %s", closed.all.failed(), closed.all.failures())
		}
	}
	b.ReportMetric(max(ratios[0], ratios[1]), "transfers_32_clients_pct_of_tpcb")
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
}
