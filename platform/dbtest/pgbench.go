package dbtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
func PgbenchTPS(b testing.TB, clients int, dur time.Duration) float64 {
	b.Helper()
	return Pgbench(b, clients, dur).TPS
}

// TPCB is one run of pgbench's TPC-B and the CPU it took.
type TPCB struct {
	Clients      int
	TPS          float64
	Transactions int64
	// Server is the server's CPU for pgbench's database over the run
	// (ServerUse.Own), and ServerUse the meter's whole reading.
	Server    time.Duration
	ServerUse ServerUse
	// Client is pgbench's own CPU (user and system, all its threads).
	Client time.Duration
	// CPUMeasured is false when the server's processes cannot be read
	// (a server on another host): Server is then 0.
	CPUMeasured bool
}

// CPUPerTransaction is the CPU of one TPC-B transaction: the server's
// and pgbench's together, as an operation of the service counts the
// server's and the service's processes. 0 when it was not measured.
func (r TPCB) CPUPerTransaction() time.Duration {
	if !r.CPUMeasured || r.Transactions == 0 {
		return 0
	}
	return (r.Server + r.Client) / time.Duration(r.Transactions)
}

// Pgbench runs pgbench's TPC-B as PgbenchTPS does and returns its rate and
// what each transaction cost in CPU, the server's and pgbench's. The zero
// TPCB when LEDGER_PGBENCH or LEDGER_PGBENCH_URL is not set.
//
// Each run starts and ends with a CHECKPOINT, so that neither the case
// nor pgbench runs while the server writes out what the other left dirty.
// TPC-B at scale 32 updates rows all over a 400 MB table and leaves up to
// the whole of shared_buffers dirty; without the checkpoint, the case
// right after it ran while the checkpointer wrote those pages, and a
// case's rate fell round after round (1,000/s to 500/s at one client)
// where, run without pgbench between its rounds, it held
// (docs/performance.md, "Each run from a checkpoint"). The CPU is read
// over pgbench's run alone, between the two checkpoints.
func Pgbench(b testing.TB, clients int, dur time.Duration) TPCB {
	b.Helper()
	prog, url := os.Getenv("LEDGER_PGBENCH"), os.Getenv("LEDGER_PGBENCH_URL")
	if prog == "" || url == "" {
		return TPCB{}
	}
	checkpoint(b, url)
	defer checkpoint(b, url)
	threads := min(clients, runtime.NumCPU())
	r := TPCB{Clients: clients}
	meter := NewServerMeter(b, url)
	if meter != nil {
		meter.Start()
	}
	cmd := exec.Command(prog, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(max(1, int(dur.Seconds()))), url)
	out, err := cmd.CombinedOutput()
	if meter != nil {
		use := meter.Stop()
		r.Server, r.ServerUse, r.CPUMeasured = use.Own, use, true
	}
	if err != nil {
		b.Fatalf("pgbench: %v: %s", err, out)
	}
	r.Client = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "tps":
			if r.TPS, err = strconv.ParseFloat(f[2], 64); err != nil {
				b.Fatalf("pgbench: %s: %v", line, err)
			}
		case strings.HasPrefix(line, "number of transactions actually processed:"):
			// "...: 12345" or, with -t, "...: 12345/20000".
			n, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "number of transactions actually processed:")), "/")
			if r.Transactions, err = strconv.ParseInt(n, 10, 64); err != nil {
				b.Fatalf("pgbench: %s: %v", line, err)
			}
		}
	}
	if r.TPS == 0 || r.Transactions == 0 {
		b.Fatalf("pgbench printed no tps or no transactions: %s", out)
	}
	return r
}

// UsePgbench points Pgbench at a fresh database pgbench -i initialised at
// scale 1, dropped when the test ends, unless LEDGER_PGBENCH and
// LEDGER_PGBENCH_URL are already set (by scripts/bench.sh): for a short
// test that runs a benchmark's path once. It returns false, and sets
// nothing, when no pgbench is installed.
func UsePgbench(t testing.TB) bool {
	t.Helper()
	if os.Getenv("LEDGER_PGBENCH") != "" && os.Getenv("LEDGER_PGBENCH_URL") != "" {
		return true
	}
	prog, ok := pgbenchProgram()
	if !ok {
		return false
	}
	u := NewEmptyURL(t)
	if out, err := exec.Command(prog, "-i", "-q", "-s", "1", u).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v: %s", err, out)
	}
	t.Setenv("LEDGER_PGBENCH", prog)
	t.Setenv("LEDGER_PGBENCH_URL", u)
	return true
}

// pgbenchProgram finds pgbench on PATH or among the installed PostgreSQL
// versions (the newest first), as scripts/bench.sh does.
func pgbenchProgram() (string, bool) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, true
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if p := filepath.Join(d, "pgbench"); isExecutable(p) {
			return p, true
		}
	}
	return "", false
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// String describes the run's CPU per transaction.
func (r TPCB) String() string {
	if !r.CPUMeasured {
		return fmt.Sprintf("TPC-B, %d clients: %.0f tps (the server's CPU not readable here)", r.Clients, r.TPS)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(r.Transactions) }
	s := fmt.Sprintf("TPC-B, %d clients: %.0f tps, %.3f ms of CPU per transaction (server %.3f, pgbench %.3f)",
		r.Clients, r.TPS, per(r.Server+r.Client), per(r.Server), per(r.Client))
	return s + "; " + r.ServerUse.CrossCheck(float64(r.Transactions))
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
