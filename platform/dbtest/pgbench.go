package dbtest

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgbenchTPS runs pgbench's TPC-B with the given clients for dur and
// returns its transactions per second, when LEDGER_PGBENCH (the pgbench
// program) and LEDGER_PGBENCH_URL (a database pgbench -i initialised) are
// set, as scripts/bench.sh does; otherwise 0. Benchmarks run it right
// before each case, so that the case and its reference see the same
// machine.
//
// Each run starts and ends with a CHECKPOINT, so that neither the case
// nor pgbench runs while the server writes out what the other left dirty.
// TPC-B at scale 32 updates rows all over a 400 MB table and leaves up to
// the whole of shared_buffers dirty; without the checkpoint, the case
// right after it ran while the checkpointer wrote those pages, and a
// case's rate fell round after round (1,000/s to 500/s at one client)
// where, run without pgbench between its rounds, it held
// (docs/performance.md, "Each run from a checkpoint").
func PgbenchTPS(b testing.TB, clients int, dur time.Duration) float64 {
	b.Helper()
	prog, url := os.Getenv("LEDGER_PGBENCH"), os.Getenv("LEDGER_PGBENCH_URL")
	if prog == "" || url == "" {
		return 0
	}
	checkpoint(b, url)
	defer checkpoint(b, url)
	threads := min(clients, runtime.NumCPU())
	out, err := exec.Command(prog, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(max(1, int(dur.Seconds()))), url).CombinedOutput()
	if err != nil {
		b.Fatalf("pgbench: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "tps" {
			tps, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				b.Fatalf("pgbench: %s: %v", line, err)
			}
			return tps
		}
	}
	b.Fatalf("pgbench printed no tps: %s", out)
	return 0
}

// checkpoint runs CHECKPOINT on the server of url. A server that refuses
// (a role neither superuser nor pg_checkpoint) only makes the ratios
// noisier: it is logged, not fatal.
func checkpoint(b testing.TB, url string) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CHECKPOINT")
	}
	if err != nil {
		b.Logf("pgbench: CHECKPOINT: %v (the case and pgbench may pay for each other's writes)", err)
	}
}
