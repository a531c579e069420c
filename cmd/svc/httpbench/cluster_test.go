package httpbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"svc/cmd/svc/clustertest"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

const (
	processorSecret = "bench-processor-secret"
	platformSecret  = "bench-platform-secret"
)

// cluster is what a run starts: a database, the simulator, the api and the
// worker, each svc process on its own.
type cluster struct {
	t         testing.TB
	dir, bin  string
	dbURL     string // the runtime role's
	env       []string
	sim       *proc
	simURL    string
	api       *proc
	apiURL    string
	worker    *proc
	apiPprof  string // the metrics listeners (/debug/pprof)
	workPprof string
	key       string // readwrite
}

// startCluster builds svc and starts the simulator, the api and the worker
// on a fresh database. The api and the worker get a metrics listener each
// (pprof on it).
func startCluster(t testing.TB) *cluster {
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir}
	logs := dir
	if d := os.Getenv("HTTPBENCH_LOG_DIR"); d != "" { // keep the processes' logs
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("HTTPBENCH_LOG_DIR: %v", err)
		}
		logs = d
	}
	c.bin = clustertest.Build(t, dir)
	c.dbURL = dbtest.NewURL(t)

	simPort, apiPort := dbtest.FreePort(t), dbtest.FreePort(t)
	c.simURL = fmt.Sprintf("http://127.0.0.1:%d", simPort)
	c.apiURL = fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	simArgs := []string{"--addr", fmt.Sprintf("127.0.0.1:%d", simPort), "--platform-secret", platformSecret}
	c.env = append(os.Environ(), "DATABASE_URL="+c.dbURL, "MIGRATE_DATABASE_URL="+dbtest.OwnerURL(c.dbURL),
		"SVC_ENV=development", "SVC_CONFIG_FILE=", "LOG_LEVEL=warn", "BITCOIN_NETWORK=regtest",
		"HTTP_LISTEN_HOST=127.0.0.1", "PROCESSOR_WEBHOOK_SECRET="+processorSecret)
	c.env = append(c.env, clustertest.SimulatorEnv(t, c.bin, c.env, simArgs...)...)

	c.sim = &proc{Name: "simulator", Bin: c.bin, Env: c.env, Log: filepath.Join(logs, "simulator.log"),
		// Every approved payout completes at once, as a payout processor's
		// eventually do: otherwise the worker's payout tracking reads every
		// open payout at each poll, a set that only grows during the run.
		Args: append(append([]string{"simulator"}, simArgs...), "--webhook-url", c.apiURL+"/webhooks/processor", "--webhook-secret", processorSecret,
			"--auto-complete-payouts"),
		Ready: c.simURL + "/_sim/"}
	apiMetrics, workerMetrics := dbtest.FreePort(t), dbtest.FreePort(t)
	c.apiPprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", apiMetrics)
	c.workPprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", workerMetrics)
	c.env = append(c.env, "PLATFORM_WEBHOOK_URL="+c.simURL+"/platform/webhooks", "PLATFORM_WEBHOOK_SECRET="+platformSecret)
	c.api = &proc{Name: "api", Bin: c.bin, Args: []string{"api"}, Log: filepath.Join(logs, "api.log"), Ready: c.apiURL + "/healthz",
		Env: append(append([]string(nil), c.env...), "PORT="+strconv.Itoa(apiPort), fmt.Sprintf("METRICS_ADDR=127.0.0.1:%d", apiMetrics),
			fmt.Sprintf("DATABASE_MAX_CONNS=%d", apiConns()))}
	c.worker = &proc{Name: "worker", Bin: c.bin, Args: []string{"worker"}, Log: filepath.Join(logs, "worker.log"),
		Env:   append(append([]string(nil), c.env...), fmt.Sprintf("METRICS_ADDR=127.0.0.1:%d", workerMetrics)),
		Ready: fmt.Sprintf("http://127.0.0.1:%d/metrics", workerMetrics)}

	// Minting keys and setting limits are signed by an admin's key.
	c.env = append(c.env, "SVC_OPERATOR_KEY="+clustertest.OperatorKey(t, c.dbURL, dir, "bench"))
	c.key = clustertest.LastLine(c.run("admin", "keys", "mint", "--scope", "readwrite", "--label", "load benchmark"))
	// Every withdrawal of the load is auto-approved (the busiest path), and
	// the rolling 24-hour cap never sends one to an operator.
	c.run("admin", "assets", "set", "BTC", "--withdrawal-auto-limit", "100000000000", "--withdrawal-daily-cap", "1000000000000000")
	for _, p := range []*proc{c.sim, c.api, c.worker} {
		if err := p.Start(); err != nil {
			t.Fatalf("start %s: %v", p.Name, err)
		}
		t.Cleanup(p.Stop)
		if err := p.WaitReady(30 * time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", p.Name, err, clustertest.Tail(p.Log))
		}
	}
	return c
}

// run runs a one-shot svc command and returns its output.
func (c *cluster) run(args ...string) string {
	c.t.Helper()
	return clustertest.Run(c.t, c.bin, c.env, args...)
}

// fund credits amount BTC units (a multiple of one BTC) to users bench-0
// ... bench-(users-1) through the ledger package (one deposit entry each,
// as a settled deposit posts it), eight at a time, after putting as much in
// the processor's wallet, then vacuums and analyzes the database.
func (c *cluster) fund(users int, amount int64) {
	c.t.Helper()
	// The processor's wallet holds, first, what the ledger will say is in
	// custody, and some more: otherwise a reconciliation (the worker runs
	// one when it starts) finds BTC insolvent and halts withdrawals, which
	// then all wait for an operator.
	btc := int64(users)*amount/100_000_000 + 1000
	resp, err := http.Post(c.simURL+"/_sim/wallet", "application/json", strings.NewReader(fmt.Sprintf(`{"confirmed":"%d"}`, btc)))
	if err != nil {
		c.t.Fatalf("simulator wallet: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("simulator wallet: %s", resp.Status)
	}
	ctx := context.Background()
	d, err := db.Open(ctx, c.dbURL, 8)
	if err != nil {
		c.t.Fatalf("open: %v", err)
	}
	defer d.Close()
	var (
		wg    sync.WaitGroup
		work  = make(chan int)
		mu    sync.Mutex
		first error
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := ledger.CreditDeposit(ctx, d.Bun, "BTC", ledger.UserHolder(userID(i)), amount, fmt.Sprint("bench-funding-", i), "load benchmark"); err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range users {
		work <- i
	}
	close(work)
	wg.Wait()
	if first != nil {
		c.t.Fatalf("fund: %v", first)
	}
	dbtest.VacuumAnalyze(c.t, c.dbURL)
}

func userID(i int) string { return fmt.Sprint("bench-", i) }

// proc is one process of the cluster.
type proc = clustertest.Proc

// restartProc stops p and starts it again.
func restartProc(t testing.TB, p *proc) {
	t.Helper()
	p.Stop()
	if err := p.Start(); err != nil {
		t.Fatalf("start %s: %v", p.Name, err)
	}
	if err := p.WaitReady(30 * time.Second); err != nil {
		t.Fatalf("%s: %v\n%s", p.Name, err, clustertest.Tail(p.Log))
	}
}

// restart restarts the api and the worker with the processor's webhooks
// held meanwhile, as a load balancer drains an instance: a delivery that
// found the api down would hold back every later one at the processor
// (BTCPay retries it 10 s, then 1 min, then 10 min later, and sends
// nothing else meanwhile).
func (c *cluster) restart(t testing.TB) {
	t.Helper()
	c.simControl(t, "webhooks/hold")
	restartProc(t, c.api)
	restartProc(t, c.worker)
	c.simControl(t, "webhooks/release")
}

// simControl posts an empty request to the simulator's control API.
func (c *cluster) simControl(t testing.TB, path string) {
	t.Helper()
	resp, err := http.Post(c.simURL+"/_sim/"+path, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("simulator %s: %v", path, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("simulator %s: %s", path, resp.Status)
	}
}

// peakRSS samples the resident memory of procs every second until stop is
// called, and returns the largest seen of each.
func peakRSS(procs ...*proc) (stop func() []int64) {
	peaks := make([]int64, len(procs))
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for i, p := range procs {
				if st, err := readProc(p.Pid()); err == nil {
					peaks[i] = max(peaks[i], st.rssBytes)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []int64 { close(done); <-finished; return peaks }
}

// procStat is a process's CPU time so far and its resident memory now.
type procStat struct {
	cpu      time.Duration
	rssBytes int64
}

// readProc reads /proc/PID/stat (utime and stime, in clock ticks of
// 1/100 s) and /proc/PID/status (VmRSS).
func readProc(pid int) (procStat, error) {
	var s procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name, in parentheses, may hold spaces: count the fields
	// after its closing parenthesis (the state is field 3, utime 14).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, err
	}
	s.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	st2, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	defer st2.Close()
	sc := bufio.NewScanner(st2)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return s, err
			}
			s.rssBytes = kb * 1024
		}
	}
	return s, sc.Err()
}

// apiConns is the api's pool: four connections per core of the database
// server, which runs on this machine, as docs/deployment.md advises
// (HTTPBENCH_API_CONNS sets another size). The worker keeps the default.
func apiConns() int {
	if n, err := strconv.Atoi(os.Getenv("HTTPBENCH_API_CONNS")); err == nil && n > 0 {
		return n
	}
	return 4 * runtime.NumCPU()
}
