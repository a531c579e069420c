package httpbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"svc/cmd/svc/clustertest"
	"svc/platform/dbtest"
)

// The CPU of one money operation, all of its path counted, against the
// CPU of one pgbench TPC-B transaction measured right before it on the
// same server (docs/performance.md, "CPU per operation").
//
// Each case runs on a quiet service (no job, webhook or payout left from
// what ran before), then TPC-B at 32 clients for 10 s, then a few seconds
// of the idle service, then its timed part: it drives its operations and
// waits until everything they set off is done (every job run, every
// processor webhook delivered, every event they emit at the receiver).
// The CPU over that part, of the api, the worker and the server
// (dbtest.ServerMeter), divided by the operations, is the operation's;
// the simulator's and the load generator's (this process) are reported
// apart and not counted.

// cpuSettings are the sizes of the three cases.
type cpuSettings struct {
	mixRate     int           // the mix's arrival rate
	mixFor      time.Duration // how long the mix is sent
	deposits    int           // deposits settled in the deposit case
	withdrawals int           // withdrawals paid out in the withdrawal case
	clients     int           // concurrent requests creating deposits and withdrawals
	tpcbClients int
	tpcbFor     time.Duration
	idle        time.Duration // the idle service measured before each case
	warmup      time.Duration // the mix before its case, not measured
	drainLimit  time.Duration // the most a case waits for its work to be done
	// pollClear: a case starts only when the deposit poll is not due
	// within this long (its TPC-B run and its timed part); 0 for no such
	// wait.
	pollClear time.Duration
	cases     []string // of "deposit", "withdrawal", "mix"
}

func loadCPUSettings(tb testing.TB, s cpuSettings) cpuSettings {
	s.mixRate = dbtest.IntEnv(tb, "HTTPBENCH_CPU_MIX_RATE", s.mixRate)
	s.mixFor = dbtest.DurationEnv(tb, "HTTPBENCH_CPU_MIX_FOR", s.mixFor)
	s.deposits = dbtest.IntEnv(tb, "HTTPBENCH_CPU_DEPOSITS", s.deposits)
	s.withdrawals = dbtest.IntEnv(tb, "HTTPBENCH_CPU_WITHDRAWALS", s.withdrawals)
	if v := os.Getenv("HTTPBENCH_CPU_CASES"); v != "" {
		s.cases = strings.Split(v, ",")
		for _, c := range s.cases {
			if !slices.Contains(cpuCases, c) {
				tb.Fatalf("HTTPBENCH_CPU_CASES=%q: %q is not one of %v", v, c, cpuCases)
			}
		}
	}
	return s
}

// The targets, in TPC-B transactions of CPU per operation (issue 44).
const (
	mixTarget        = 6
	depositTarget    = 10
	withdrawalTarget = 12
)

// cpuUse is the CPU of every process over one timed part.
type cpuUse struct {
	wall        time.Duration
	api, worker time.Duration
	server      dbtest.ServerUse
	serverRead  bool // false: the server's processes are not readable here
	sim, load   time.Duration
}

// service is what counts: the api, the worker and the server.
func (u cpuUse) service() time.Duration { return u.api + u.worker + u.server.Own }

// cpuMeter reads the CPU of the cluster's processes, the server's for the
// cluster's database, and this process's.
type cpuMeter struct {
	c      *cluster
	server *dbtest.ServerMeter
	procs  [3]*proc
	pids   [3]int
	first  [4]time.Duration
	t0     time.Time
}

// newCPUMeter measures the cluster's processes as they are now (a restart
// needs a new meter); skip are the server processes of the benchmark's own
// connections to the database, left out.
func (c *cluster) newCPUMeter(tb testing.TB, skip ...int) *cpuMeter {
	return &cpuMeter{c: c, server: dbtest.NewServerMeter(tb, dbtest.AdminURLOf(tb, c.dbURL), skip...),
		procs: [3]*proc{c.api, c.worker, c.sim}, pids: [3]int{c.api.Pid(), c.worker.Pid(), c.sim.Pid()}}
}

func (m *cpuMeter) read() (out [4]time.Duration) {
	for i, pid := range m.pids {
		st, err := readProc(pid)
		if err != nil {
			p := m.procs[i]
			m.c.t.Fatalf("cpu of %s (pid %d): %v; its log ends:\n%s", p.Name, pid, err, clustertest.Tail(p.Log))
		}
		out[i] = st.cpu
	}
	out[3] = dbtest.SelfCPU()
	return out
}

func (m *cpuMeter) start() {
	if m.server != nil {
		m.server.Start()
	}
	m.first, m.t0 = m.read(), time.Now()
}

func (m *cpuMeter) stop() cpuUse {
	last, wall := m.read(), time.Since(m.t0)
	u := cpuUse{wall: wall, api: last[0] - m.first[0], worker: last[1] - m.first[1], sim: last[2] - m.first[2], load: last[3] - m.first[3]}
	if m.server != nil {
		u.server, u.serverRead = m.server.Stop(), true
	}
	return u
}

// opCost is one case's result.
type opCost struct {
	kind   string  // deposit, withdrawal or mix
	name   string  // the operation, as the issue names it
	target float64 // TPC-B transactions of CPU per operation
	ops    int     // operations in the timed part
	use    cpuUse
	idle   cpuUse // the idle service before the timed part
	tpcb   dbtest.TPCB
	driven time.Duration // how long the operations were sent (the rest of the part: their work finishing)
	rate   string        // the rate achieved, said in the case's terms
	failed int           // requests without a 2xx
	jobs   map[string]int
	// unfinished says what was left when the timed part gave up waiting
	// for its work to be done ("" when it was all done).
	unfinished string
}

// ratio is the operation's CPU in TPC-B transactions of CPU, 0 without a
// reference.
func (o opCost) ratio() float64 {
	per := o.tpcb.CPUPerTransaction()
	if per <= 0 || o.ops == 0 || !o.use.serverRead {
		return 0
	}
	return float64(o.use.service()) / float64(o.ops) / float64(per)
}

// print writes the case's lines: the ratio with its target and verdict
// (scripts/bench.sh repeats the lines starting "cpu ratio:" in its
// summary), then where the CPU went.
func (o opCost) print(logf func(string, ...any)) {
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(max(o.ops, 1)) }
	u := o.use
	if r := o.ratio(); r > 0 {
		verdict := "missed"
		if r <= o.target {
			verdict = "met"
		}
		logf("cpu ratio: %s: %.1f TPC-B transactions of CPU per operation (target ≤ %.0f): %s", o.name, r, o.target, verdict)
	} else {
		logf("cpu ratio: %s: no TPC-B reference (LEDGER_PGBENCH unset, or the server's processes not readable): %.2f ms of CPU per operation (target ≤ %.0f TPC-B transactions)",
			o.name, per(u.service()), o.target)
	}
	logf("  %.2f ms of CPU per operation: api %.2f, worker %.2f, PostgreSQL %.2f; apart: simulator %.2f, load generator %.2f",
		per(u.service()), per(u.api), per(u.worker), per(u.server.Own), per(u.sim), per(u.load))
	sent := ""
	if o.driven > 0 {
		sent = fmt.Sprintf(" (operations sent over %.1f s, then their work finishing)", o.driven.Seconds())
	}
	logf("  %d operations, %s; timed part %.1f s%s; %d requests without a 2xx", o.ops, o.rate, u.wall.Seconds(), sent, o.failed)
	if o.unfinished != "" {
		logf("  NOT ALL DONE when the timed part ended: %s", o.unfinished)
	}
	if o.idle.wall > 0 {
		rate := func(d time.Duration) float64 { return 1000 * d.Seconds() / o.idle.wall.Seconds() }
		share := 0.0
		if u.service() > 0 {
			share = 100 * rate(o.idle.service()) / 1000 * u.wall.Seconds() / u.service().Seconds()
		}
		logf("  the idle service before it: %.1f ms of CPU a second (api %.1f, worker %.1f, PostgreSQL %.1f): %.1f%% of the timed part's CPU at that rate",
			rate(o.idle.service()), rate(o.idle.api), rate(o.idle.worker), rate(o.idle.server.Own), share)
	}
	if u.serverRead {
		logf("  PostgreSQL cross-check: %s", u.server.CrossCheck(float64(max(o.ops, 1))))
	}
	if len(o.jobs) > 0 {
		logf("  jobs finished in the timed part, by kind: %v", o.jobs)
	}
	if o.tpcb.Transactions > 0 {
		logf("  reference, right before: %s", o.tpcb)
	}
}

// cpuCases are the operations measured, in the order they run.
var cpuCases = []string{"deposit", "withdrawal", "mix"}

// cpuRun measures the operations of s.cases (all when empty) on c, in
// turn, each against its own TPC-B run.
func cpuRun(tb testing.TB, c *cluster, g *targets, s cpuSettings, logf func(string, ...any)) []opCost {
	d := newDrainer(tb, c)
	defer d.close()
	measure := map[string]func(testing.TB, *cluster, *targets, *drainer, cpuSettings, func(string, ...any)) opCost{
		"deposit": cpuDeposits, "withdrawal": cpuWithdrawals, "mix": cpuMix}
	var out []opCost
	for _, k := range cpuCases {
		if len(s.cases) == 0 || slices.Contains(s.cases, k) {
			o := measure[k](tb, c, g, d, s, logf)
			o.kind = k
			out = append(out, o)
		}
	}
	return out
}

// reference runs what comes right before each timed part: TPC-B, then
// the idle service.
func reference(tb testing.TB, c *cluster, d *drainer, s cpuSettings, logf func(string, ...any)) (dbtest.TPCB, cpuUse) {
	d.clearOfPoll(tb, s.pollClear, logf)
	tpcb := dbtest.Pgbench(tb, s.tpcbClients, s.tpcbFor)
	m := c.newCPUMeter(tb, d.pid)
	m.start()
	time.Sleep(s.idle)
	return tpcb, m.stop()
}

// cpuDeposits: deposits created and paid at the processor with its
// webhooks held, then, timed, the webhooks released until both events of
// every deposit (deposit.detected, deposit.settled) are at the receiver.
func cpuDeposits(tb testing.TB, c *cluster, g *targets, d *drainer, s cpuSettings, logf func(string, ...any)) opCost {
	o := opCost{name: "a settled deposit, webhook in to both events delivered", target: depositTarget}
	created, st := createN(g, deposits, s.deposits, s.clients)
	o.failed = st.failed()
	var ids, invoices []string
	for _, body := range created {
		var v struct {
			DepositID    string  `json:"deposit_id"`
			CheckoutLink *string `json:"checkout_link"`
		}
		if json.Unmarshal(body, &v) != nil || v.CheckoutLink == nil {
			tb.Fatalf("deposit: %s", body)
		}
		ids = append(ids, v.DepositID)
		invoices = append(invoices, (*v.CheckoutLink)[strings.LastIndexByte(*v.CheckoutLink, '/')+1:])
	}
	d.await(tb, s.drainLimit, logf, "the deposits' creation", nil)
	var idle cpuUse
	o.tpcb, idle = reference(tb, c, d, s, logf)
	c.simControl(tb, "webhooks/hold")
	payAll(tb, c, invoices, s.clients)
	m := c.newCPUMeter(tb, d.pid)
	jobs0 := d.jobsDone(tb)
	m.start()
	defer c.profile(tb, "deposit", 12*time.Second)()
	c.simControl(tb, "webhooks/release")
	o.unfinished = d.await(tb, s.drainLimit, logf, "the deposits' settlement", d.events(map[string][]string{"deposit.detected": ids, "deposit.settled": ids}))
	o.use, o.idle, o.ops = m.stop(), idle, len(ids)
	o.jobs = d.jobsSince(tb, jobs0)
	o.rate = fmt.Sprintf("%.0f settled a second", float64(o.ops)/o.use.wall.Seconds())
	return o
}

// profile, with HTTPBENCH_PPROF_DIR set, writes CPU profiles of the api
// and the worker over the next d to name-api.cpu.pprof and
// name-worker.cpu.pprof there; the function it returns waits for them.
func (c *cluster) profile(tb testing.TB, name string, d time.Duration) func() {
	dir := os.Getenv("HTTPBENCH_PPROF_DIR")
	if dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, p := range []struct{ name, url string }{{"api", c.apiPprof}, {"worker", c.workPprof}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(dir, name+"-"+p.name+".cpu.pprof")
			if err := fetch(fmt.Sprintf("%s/profile?seconds=%d", p.url, int(d.Seconds())), path); err != nil {
				tb.Errorf("profile of %s: %v", p.name, err)
			}
		}()
	}
	return wg.Wait
}

// cpuWithdrawals: timed, withdrawals created (auto-approved) until each is
// confirmed and its events (withdrawal.broadcast, withdrawal.completed)
// are at the receiver. The worker's payout pass runs every 10 s
// (PAYOUT_POLL_INTERVAL), so part of the timed part is the service
// waiting for it.
func cpuWithdrawals(tb testing.TB, c *cluster, g *targets, d *drainer, s cpuSettings, logf func(string, ...any)) opCost {
	o := opCost{name: "an auto-approved withdrawal, request to confirmed with its events", target: withdrawalTarget}
	d.await(tb, s.drainLimit, logf, "the withdrawals", nil)
	o.tpcb, o.idle = reference(tb, c, d, s, logf)
	m := c.newCPUMeter(tb, d.pid)
	jobs0 := d.jobsDone(tb)
	m.start()
	defer c.profile(tb, "withdrawal", 12*time.Second)()
	t0 := time.Now()
	created, st := createN(g, withdrawals, s.withdrawals, s.clients)
	o.driven = time.Since(t0)
	o.failed = st.failed()
	ids := withdrawalIDs(tb, created)
	o.unfinished = d.await(tb, s.drainLimit, logf, "the withdrawals' payouts", d.events(map[string][]string{"withdrawal.broadcast": ids, "withdrawal.completed": ids}))
	o.use, o.ops = m.stop(), len(ids)
	o.jobs = d.jobsSince(tb, jobs0)
	o.rate = fmt.Sprintf("created at %.0f a second from %d clients, %.0f confirmed a second over the timed part",
		float64(o.ops)/o.driven.Seconds(), s.clients, float64(o.ops)/o.use.wall.Seconds())
	return o
}

// cpuMix: timed, the mix sent at a fixed rate, then until every withdrawal
// it created is confirmed with its events at the receiver and its other
// work (the processor's webhooks for its deposits' invoices and payouts,
// its jobs) is done.
func cpuMix(tb testing.TB, c *cluster, g *targets, d *drainer, s cpuSettings, logf func(string, ...any)) opCost {
	o := opCost{name: "a request of the HTTP mix", target: mixTarget}
	attack(g, "", s.mixRate, s.warmup, nil)
	d.await(tb, s.drainLimit, logf, "the mix", nil)
	o.tpcb, o.idle = reference(tb, c, d, s, logf)
	m := c.newCPUMeter(tb, d.pid)
	jobs0 := d.jobsDone(tb)
	var created [][]byte
	m.start()
	st := attack(g, "", s.mixRate, s.mixFor, func(e endpoint, r *vegeta.Result) {
		if e == withdrawals && r.Code == http.StatusCreated {
			created = append(created, r.Body)
		}
	})
	o.driven = st.duration
	ids := withdrawalIDs(tb, created)
	o.unfinished = d.await(tb, s.drainLimit, logf, "the mix's work", d.events(map[string][]string{"withdrawal.broadcast": ids, "withdrawal.completed": ids}))
	o.use, o.ops, o.failed = m.stop(), st.all.requests(), st.all.failed()
	o.jobs = d.jobsSince(tb, jobs0)
	o.rate = fmt.Sprintf("sent at %.0f a second (%d asked), p50 %.2f ms, p99 %.2f ms", st.achieved(), s.mixRate,
		ms(st.all.quantile(0.5)), ms(st.all.quantile(0.99)))
	return o
}

func withdrawalIDs(tb testing.TB, bodies [][]byte) []string {
	ids := make([]string, 0, len(bodies))
	for _, b := range bodies {
		var v struct {
			WithdrawalID string `json:"withdrawal_id"`
			Status       string `json:"status"`
		}
		if json.Unmarshal(b, &v) != nil || v.WithdrawalID == "" {
			tb.Fatalf("withdrawal: %s", b)
		}
		if v.Status != "approved" {
			tb.Fatalf("withdrawal %s: %s, not auto-approved", v.WithdrawalID, v.Status)
		}
		ids = append(ids, v.WithdrawalID)
	}
	return ids
}

// createN sends n requests of one endpoint from clients concurrent
// clients, each sending its next when its last is answered, and returns the
// bodies of the 201s.
func createN(g *targets, only endpoint, n, clients int) ([][]byte, *stats) {
	var (
		mu     sync.Mutex
		bodies [][]byte
		st     stats
		wg     sync.WaitGroup
	)
	next := make(chan struct{})
	tr := g.targeter(only)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				var t vegeta.Target
				_ = tr(&t)
				req, err := t.Request()
				r := &vegeta.Result{Method: t.Method, URL: t.URL, Timestamp: time.Now()}
				if err == nil {
					var resp *http.Response
					if resp, err = hc.Do(req); err == nil {
						r.Body, _ = io.ReadAll(resp.Body)
						resp.Body.Close()
						r.Code = uint16(resp.StatusCode)
					}
				}
				r.Latency = time.Since(r.Timestamp)
				if err != nil {
					r.Error = err.Error()
				}
				mu.Lock()
				st.add(r)
				if r.Code == http.StatusCreated {
					bodies = append(bodies, r.Body)
				}
				mu.Unlock()
			}
		}()
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	st.metrics.Close()
	hc.CloseIdleConnections()
	return bodies, &st
}

// payAll pays each invoice in full at the simulator, settled at once.
func payAll(tb testing.TB, c *cluster, invoices []string, clients int) {
	work := make(chan string)
	var wg sync.WaitGroup
	var failed sync.Map
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				resp, err := http.Post(c.simURL+"/_sim/invoices/"+id+"/pay", "application/json", strings.NewReader(`{"settled":true}`))
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
					}
				}
				if err != nil {
					failed.Store(id, err)
				}
			}
		}()
	}
	for _, id := range invoices {
		work <- id
	}
	close(work)
	wg.Wait()
	failed.Range(func(k, v any) bool {
		tb.Fatalf("pay invoice %s: %v", k, v)
		return false
	})
}

// drainer tells when the service has nothing left to do, from one
// connection to its database (whose server process the meters leave out)
// and from the simulator.
type drainer struct {
	c    *cluster
	conn *pgx.Conn
	pid  int
}

func newDrainer(tb testing.TB, c *cluster) *drainer {
	conn := adminConn(tb, c.dbURL)
	return &drainer{c: c, conn: conn, pid: dbtest.BackendPID(tb, conn)}
}

func (d *drainer) close() { d.conn.Close(context.Background()) }

// events returns a check that the receiver has an event of each type for
// each of its ids (the deposit's or the withdrawal's id in the event's
// data).
func (d *drainer) events(want map[string][]string) func() (bool, string) {
	return func() (bool, string) {
		resp, err := http.Get(d.c.simURL + "/platform/events")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var body struct {
			Events []struct {
				Type string `json:"type"`
				Data struct {
					DepositID    string `json:"deposit_id"`
					WithdrawalID string `json:"withdrawal_id"`
				} `json:"data"`
			} `json:"events"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		for _, e := range body.Events {
			have[e.Type+" "+e.Data.DepositID+e.Data.WithdrawalID] = true
		}
		var missing []string
		for typ, ids := range want {
			n := 0
			for _, id := range ids {
				if !have[typ+" "+id] {
					n++
				}
			}
			if n > 0 {
				missing = append(missing, fmt.Sprintf("%d %s", n, typ))
			}
		}
		return len(missing) == 0, "events missing at the receiver: " + strings.Join(missing, ", ")
	}
}

// await waits, at most limit, until no job is available or running, the
// processor has no webhook left to send and, when set, done says so; it
// polls every 100 ms, the database first. A wait that gives up is logged
// with what was left.
func (d *drainer) await(tb testing.TB, limit time.Duration, logf func(string, ...any), what string, done func() (bool, string)) (left string) {
	ctx := context.Background()
	t0 := time.Now()
	for {
		left = ""
		var jobs int
		if err := d.conn.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state IN ('available', 'running')`).Scan(&jobs); err != nil {
			tb.Fatalf("jobs: %v", err)
		}
		if jobs > 0 {
			left = fmt.Sprintf("%d jobs available or running", jobs)
		} else if hooks := simHooks(tb, d.c).Pending; hooks > 0 {
			left = fmt.Sprintf("%d processor webhooks to send", hooks)
		} else if done != nil {
			if ok, why := done(); !ok {
				left = why
			}
		}
		if left == "" {
			return ""
		}
		if time.Since(t0) > limit {
			logf("after %s: gave up waiting after %s: %s", what, limit, left)
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// depositPollEvery is DEPOSIT_POLL_INTERVAL's default, which the cluster
// keeps.
const depositPollEvery = 2 * time.Minute

// clearOfPoll waits, when the worker's deposit poll is due within the
// next within, until it has run. The poll reconciles up to 500 open or
// recently settled deposits against the processor every two minutes
// whatever the load (deposit.PollBatch): a cost of the service's clock,
// not of the operations, which one timed part in two would otherwise
// catch and another not (a second or two of CPU).
func (d *drainer) clearOfPoll(tb testing.TB, within time.Duration, logf func(string, ...any)) {
	if within <= 0 {
		return
	}
	ctx := context.Background()
	var last time.Time
	var dueSeconds float64
	if err := d.conn.QueryRow(ctx, `SELECT coalesce(max(created_at), now()), extract(epoch FROM coalesce(max(created_at), now()) + $1::interval - now())::float8
 FROM river_job WHERE kind = 'deposit_poll'`, depositPollEvery.String()).Scan(&last, &dueSeconds); err != nil {
		tb.Fatalf("deposit poll: %v", err)
	}
	due := time.Duration(dueSeconds * float64(time.Second))
	if due >= within || due < -depositPollEvery {
		return
	}
	t0 := time.Now()
	for deadline := t0.Add(due + 2*time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var ran bool
		if err := d.conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM river_job WHERE kind = 'deposit_poll' AND created_at > $1 AND finalized_at IS NOT NULL)`,
			last).Scan(&ran); err != nil {
			tb.Fatalf("deposit poll: %v", err)
		}
		if ran {
			logf("waited %s for the deposit poll, due in %s, to run before the next case", time.Since(t0).Round(time.Second), due.Round(time.Second))
			return
		}
	}
	logf("the deposit poll, due in %s, did not run within %s: it may run in the timed part", due.Round(time.Second), time.Since(t0).Round(time.Second))
}

// jobsDone counts the jobs finished so far, by kind.
func (d *drainer) jobsDone(tb testing.TB) map[string]int {
	rows, err := d.conn.Query(context.Background(), `SELECT kind, count(*) FROM river_job WHERE finalized_at IS NOT NULL GROUP BY kind`)
	if err != nil {
		tb.Fatalf("jobs: %v", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			tb.Fatalf("jobs: %v", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("jobs: %v", err)
	}
	return out
}

// jobsSince counts the jobs finished since before, by kind.
func (d *drainer) jobsSince(tb testing.TB, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range d.jobsDone(tb) {
		if n > before[k] {
			out[k] = n - before[k]
		}
	}
	return out
}

// BenchmarkCPUPerOperation measures the CPU of the three money
// operations of issue 44, each against TPC-B right before it (make bench,
// make bench-http; HTTPBENCH_USERS, HTTPBENCH_CPU_* settings in
// docs/performance.md). It runs once whatever b.N is, three to four
// minutes.
func BenchmarkCPUPerOperation(b *testing.B) {
	s := loadSettings(b, settings{users: 10_000})
	cs := loadCPUSettings(b, cpuSettings{mixRate: 150, mixFor: 15 * time.Second, deposits: 1500, withdrawals: 1000, clients: 8,
		tpcbClients: 32, tpcbFor: 10 * time.Second, idle: 3 * time.Second, warmup: 5 * time.Second, drainLimit: 2 * time.Minute,
		pollClear: 75 * time.Second})
	logf := cpuLogf
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
	c := startCluster(b)
	c.fund(s.users, 10_000_000_000)
	g := newTargets(c.apiURL, c.key, s.users)
	costs := cpuRun(b, c, g, cs, logf)
	logf("")
	logf("CPU per operation, all its work counted, in TPC-B transactions of CPU (api, worker and PostgreSQL against server and pgbench):")
	for _, o := range costs {
		o.print(logf)
	}
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
	for _, o := range costs {
		b.ReportMetric(o.ratio(), o.kind+"_tpcb_cpu")
	}
}

// TestCPUPerOperationShort runs the CPU measurements once on a few
// operations (make test), so that they cannot rot: every operation must
// finish with its events delivered and every figure must be produced. It
// asserts no ratio and no timing.
func TestCPUPerOperationShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole service as separate processes")
	}
	withRef := dbtest.UsePgbench(t)
	c := startCluster(t)
	c.fund(200, 10_000_000_000)
	g := newTargets(c.apiURL, c.key, 200)
	costs := cpuRun(t, c, g, cpuSettings{mixRate: 20, mixFor: 2 * time.Second, deposits: 20, withdrawals: 10, clients: 4,
		tpcbClients: 4, tpcbFor: time.Second, idle: 500 * time.Millisecond, warmup: time.Second, drainLimit: time.Minute,
		pollClear: time.Second}, t.Logf)
	if len(costs) != len(cpuCases) {
		t.Errorf("%d operations measured, want %d", len(costs), len(cpuCases))
	}
	for _, o := range costs {
		o.print(t.Logf)
		u := o.use
		if o.ops == 0 || o.failed != 0 || o.unfinished != "" {
			t.Errorf("%s: %d operations, %d without a 2xx, left: %q", o.name, o.ops, o.failed, o.unfinished)
		}
		// A few operations may take less than a clock tick (10 ms) of a
		// process: only the sum must show.
		if u.service() <= 0 || u.wall <= 0 || (u.serverRead && u.server.Own <= 0) {
			t.Errorf("%s: cpu %+v", o.name, u)
		}
		if withRef && u.serverRead && (o.tpcb.CPUPerTransaction() <= 0 || o.ratio() <= 0) {
			t.Errorf("%s: no ratio: %s", o.name, o.tpcb)
		}
	}
}

// cpuLogf prints to the benchmark's output (a benchmark's own log keeps
// ten lines).
func cpuLogf(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }
