package dbtest

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PgbenchTPS runs pgbench's TPC-B with the given clients for dur and
// returns its transactions per second, when LEDGER_PGBENCH (the pgbench
// program) and LEDGER_PGBENCH_URL (a database pgbench -i initialised) are
// set, as scripts/bench.sh does; otherwise 0. Benchmarks run it right
// before each case, so that the case and its reference see the same
// machine.
func PgbenchTPS(b testing.TB, clients int, dur time.Duration) float64 {
	b.Helper()
	prog, url := os.Getenv("LEDGER_PGBENCH"), os.Getenv("LEDGER_PGBENCH_URL")
	if prog == "" || url == "" {
		return 0
	}
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
