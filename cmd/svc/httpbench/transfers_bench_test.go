package httpbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc/platform/dbtest"
)

// BenchmarkHTTPTransfers: one-leg user-to-user transfers (POST
// /v1/transfers between two of 10,000 funded users) from 32 clients in a
// closed loop for 10 s, each sending its next request when its last is
// answered as pgbench's clients do, against pgbench TPC-B at 32 clients
// run right before it on the same server (docs/performance.md, "Transfers,
// escrow holds and the hot account"; target: at least 50% of TPC-B). Each
// round also prints the CPU per transfer of the api, the worker and the
// database's backends (from /proc), which another load on the machine
// moves less than the rate. With HTTPBENCH_PPROF_DIR set, the first
// round's CPU profiles of the api and the worker go there
// (transfers-api.cpu.pprof, transfers-worker.cpu.pprof), and, after
// both rounds, how often each index of the tables a transfer writes was
// scanned (transfers-indexes.txt).
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
		profiled := func() {}
		if round == 1 {
			profiled = c.profile(b, "transfers", 9*time.Second)
		}
		cpu := startTransferCPU(b, c)
		closed := closedLoop(g, transfers, 32, 10*time.Second)
		used := cpu()
		profiled()
		ratio := 0.0 // without LEDGER_PGBENCH (scripts/bench.sh sets it), no reference
		if tpcb > 0 {
			ratio = 100 * float64(closed.rate) / tpcb
		}
		ratios = append(ratios, ratio)
		logf("transfers, 32 clients, closed loop, 10 s, round %d: %d/s, p50 %.2f ms, p99 %.2f ms, not 2xx %d %s; TPC-B right before: %.0f tps; %.0f%% of TPC-B",
			round, closed.rate, ms(closed.all.quantile(0.5)), ms(closed.all.quantile(0.99)), closed.all.failed(), closed.all.failures(), tpcb, ratio)
		if n := closed.all.requests(); n > 0 {
			per := func(d time.Duration) float64 { return ms(d) / float64(n) }
			logf("  CPU per transfer (the round's CPU over its %d requests): database backends %.2f ms, api %.2f ms, worker %.2f ms",
				n, per(used[0]), per(used[1]), per(used[2]))
		}
		if closed.all.failed() != 0 {
			b.Errorf("transfers: %d answers were not a 2xx: %s", closed.all.failed(), closed.all.failures())
		}
	}
	b.ReportMetric(max(ratios[0], ratios[1]), "transfers_32_clients_pct_of_tpcb")
	if s.pprofDir != "" {
		indexUse(b, c.dbURL, filepath.Join(s.pprofDir, "transfers-indexes.txt"))
	}
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
}

// startTransferCPU starts counting the CPU of the database's backends, the
// api and the worker; the function it returns stops and returns the three.
// A backend that ended meanwhile is missed; one that started counts whole.
func startTransferCPU(tb testing.TB, c *cluster) func() [3]time.Duration {
	procs := func() (api, worker time.Duration) {
		a, err := readProc(c.api.Pid())
		if err != nil {
			tb.Fatalf("api: %v", err)
		}
		w, err := readProc(c.worker.Pid())
		if err != nil {
			tb.Fatalf("worker: %v", err)
		}
		return a.cpu, w.cpu
	}
	pg0 := pgBackends(tb, c.dbURL)
	api0, worker0 := procs()
	return func() (out [3]time.Duration) {
		api1, worker1 := procs()
		for pid, cpu := range pgBackends(tb, c.dbURL) {
			out[0] += cpu - pg0[pid]
		}
		out[1], out[2] = api1-api0, worker1-worker0
		return out
	}
}

// indexUse writes to path, for each index of the tables a transfer writes,
// how often the run scanned it (pg_stat_user_indexes.idx_scan): an index
// the transfer maintains and nothing reads shows 0. A query that reads it
// elsewhere (a list, a sweep, a check) may simply not have run.
func indexUse(tb testing.TB, u, path string) {
	ctx := context.Background()
	conn := adminConn(tb, u)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT relname, indexrelname, idx_scan FROM pg_stat_user_indexes
 WHERE relname IN ('transfers', 'transfer_legs', 'transfer_parties', 'outbound_events', 'idempotency_keys',
                   'ledger_entries', 'ledger_postings', 'ledger_accounts', 'river_job')
 ORDER BY relname, indexrelname`)
	if err != nil {
		tb.Errorf("index use: %v", err)
		return
	}
	var out strings.Builder
	for rows.Next() {
		var table, index string
		var scans int64
		if err := rows.Scan(&table, &index, &scans); err != nil {
			tb.Errorf("index use: %v", err)
			return
		}
		fmt.Fprintf(&out, "%s\t%s\t%d\n", table, index, scans)
	}
	if err := rows.Err(); err != nil {
		tb.Errorf("index use: %v", err)
		return
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		tb.Errorf("index use: %v", err)
	}
}
