package httpbench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"svc/platform/dbtest"
)

// settings of a run, from the environment; short runs (make test) use
// their own.
type settings struct {
	users    int
	step     time.Duration // each step of a rate search
	pause    time.Duration // between steps
	warmup   time.Duration // the mix at the hold's rate before the hold, not measured
	hold     time.Duration // the mix held at its rate, deposits paid meanwhile
	payRate  int           // deposits paid per second during the hold, at most
	holdRate int           // when set, no rate searches: the mix is held at this rate
	pprofDir string        // where CPU profiles of the hold go, if set
}

func loadSettings(tb testing.TB, s settings) settings {
	env := func(name string, parse func(string) error) {
		if v := os.Getenv(name); v != "" {
			if err := parse(v); err != nil {
				tb.Fatalf("%s=%q: %v", name, v, err)
			}
		}
	}
	dur := func(d *time.Duration) func(string) error {
		return func(v string) (err error) { *d, err = time.ParseDuration(v); return }
	}
	env("HTTPBENCH_USERS", func(v string) (err error) { s.users, err = strconv.Atoi(v); return })
	env("HTTPBENCH_STEP", dur(&s.step))
	env("HTTPBENCH_HOLD", dur(&s.hold))
	env("HTTPBENCH_PAY_RATE", func(v string) (err error) { s.payRate, err = strconv.Atoi(v); return })
	env("HTTPBENCH_HOLD_RATE", func(v string) (err error) { s.holdRate, err = strconv.Atoi(v); return })
	s.pprofDir = os.Getenv("HTTPBENCH_PPROF_DIR")
	return s
}

const p99Limit = 50 * time.Millisecond

// balanceP99Limit is the balance reads' own latency target.
const balanceP99Limit = 10 * time.Millisecond

// searches: where each rate search starts and the most it tries.
var searches = []struct {
	only           endpoint
	start, ceiling int
}{
	{balances, 1000, 16_000},
	{transactions, 1000, 16_000},
	{withdrawals, 50, 4000},
	{deposits, 50, 4000},
	{"", 250, 8000},
}

// BenchmarkHTTP is the full run (make bench-http; make bench). It runs once
// whatever b.N is.
func BenchmarkHTTP(b *testing.B) {
	s := loadSettings(b, settings{users: 10_000, step: 5 * time.Second, pause: 2 * time.Second, warmup: 5 * time.Second,
		hold: 30 * time.Second, payRate: 25})
	// Straight to the output: a benchmark's own log keeps ten lines.
	logf := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
	c := startCluster(b)
	t0 := time.Now()
	c.fund(s.users, 10_000_000_000)
	logf("funded %d users in %s", s.users, time.Since(t0).Round(time.Millisecond))
	logf("api pool: %d connections (DATABASE_MAX_CONNS; HTTPBENCH_API_CONNS)", apiConns())
	// The reference, right before the load, on the same server.
	tpcb := dbtest.PgbenchTPS(b, 32, 10*time.Second)
	g := newTargets(c.apiURL, c.key, s.users)

	plan := searches
	if s.holdRate > 0 {
		plan = nil
		logf("no rate searches: the mix is held at HTTPBENCH_HOLD_RATE=%d", s.holdRate)
	} else {
		logf("rate searches: each step %s, p99 limit %s, every answer a 2xx", s.step, p99Limit)
	}
	best := map[endpoint]*step{}
	all := map[endpoint][]*step{}
	var best10 *step
	stopPeaks := peakRSS(c.api, c.worker, c.sim)
	for i, sr := range plan {
		if i > 0 {
			// Each search starts from fresh processes: the overloaded
			// steps of the one before leave a backlog (queued requests,
			// thousands of idle connections) that the next search's
			// first steps would otherwise be measured against. The
			// withdrawals they created are paid out and the processor's
			// webhooks delivered first (awaitQuiet). The fresh processes
			// are warmed up (connections, caches), as the hold's are, at
			// half the search's first rate.
			c.restart(b)
			c.awaitQuiet(logf, "the search for "+name(sr.only))
			attack(g, sr.only, max(1, sr.start/2), s.warmup, nil)
		}
		steps, bst := search(g, sr.only, sr.start, sr.ceiling, 2, s.step, s.pause, p99Limit, logf)
		best[sr.only], all[sr.only] = bst, steps
		if sr.only == balances {
			// Balance reads have a target of their own at a tighter p99:
			// a search at that limit, so that the rates between the 50 ms
			// search's doublings are tried too; run before the creations,
			// whose payouts and webhooks the worker and the processor
			// still work through during the searches after them.
			c.restart(b)
			attack(g, balances, 2000, s.warmup, nil)
			logf("balance reads, p99 limit %s:", balanceP99Limit)
			_, best10 = search(g, balances, 4000, 16_000, 3, s.step, s.pause, balanceP99Limit, logf)
		}
	}
	peaks := stopPeaks()
	rate := searches[len(searches)-1].start / 4
	if m := best[""]; m != nil {
		rate = m.rate
	}
	if s.holdRate > 0 {
		rate = s.holdRate
	}
	// The overloaded steps of the searches leave thousands of connections'
	// worth of memory in the api, which the Go runtime returns only
	// slowly: the hold starts from fresh processes, warmed up at its rate.
	// A rate a 5 s step passed may still not be sustained: the work it
	// leaves behind (payouts, webhooks, events) builds up over 30 s. A hold
	// that misses the p99 limit is run again at three quarters of its
	// rate, at most twice; the last hold is the one reported. Each starts
	// once the work left by what ran before it is done (awaitQuiet): the
	// hold measures the mix's own work at its rate, not a backlog.
	var h held
	for try := 0; ; try++ {
		c.restart(b)
		c.awaitQuiet(logf, "the hold")
		attack(g, "", rate, s.warmup, nil)
		h = holdMix(b, c, g, rate, s)
		if h.sustained() || try == 2 {
			break
		}
		logf("the mix held at %d/s for %s: p99 %.1f ms, %d without a 2xx: not sustained; holding again at %d/s",
			rate, s.hold, ms(h.step.all.quantile(0.99)), h.step.all.failed(), rate*3/4)
		rate = rate * 3 / 4
	}
	var closed *step
	var closedTPCB float64
	if s.holdRate == 0 {
		// Withdrawal creations from 32 clients, closed loop, as pgbench's
		// 32 clients load the server: the reading of the target "at 32
		// clients" that compares with TPC-B, paired with a TPC-B run right
		// before it. The open-loop search above answers another question
		// (the highest arrival rate at p99 <= 50 ms). Last: the thousands
		// of withdrawals it creates would otherwise be paid out beside
		// the hold. The verdict compares with the higher TPC-B reading of
		// the run (report).
		c.restart(b)
		c.awaitQuiet(logf, "the closed loop")
		attack(g, withdrawals, 50, s.warmup, nil)
		closedTPCB = dbtest.PgbenchTPS(b, 32, 10*time.Second)
		w0, _ := readProc(c.worker.Pid())
		from := time.Now()
		closed = closedLoop(g, withdrawals, 32, 10*time.Second)
		to := time.Now()
		w1, _ := readProc(c.worker.Pid())
		logf("withdrawal creations, 32 clients, closed loop, 10 s: %d/s, p50 %.2f ms, p99 %.2f ms, not 2xx %d %s; TPC-B right before: %.0f tps",
			closed.rate, ms(closed.all.quantile(0.5)), ms(closed.all.quantile(0.99)), closed.all.failed(), closed.all.failures(), closedTPCB)
		// The worker pays the loop's withdrawals as they come (a pass
		// every 10 s): how much of the loop it ran beside.
		logf("  beside it: %d withdrawals paid out by the worker, which took %.2f of a core",
			confirmedBetween(b, c.dbURL, from, to), (w1.cpu-w0.cpu).Seconds()/to.Sub(from).Seconds())
	}
	r := report{targets: true, tpcb: tpcb, best: best, steps: all, balances10: best10, hold: h, searchRSS: peaks,
		closed: closed, closedTPCB: closedTPCB}
	r.print(logf)
	logf("%s, load average %s", time.Now().UTC().Format(time.RFC3339), loadAverage())
	if m := best[""]; m != nil {
		b.ReportMetric(float64(m.rate), "mix_req/s")
	}
	if closed != nil && closedTPCB > 0 {
		b.ReportMetric(100*float64(closed.rate)/max(closedTPCB, tpcb), "withdrawals_32_clients_pct_of_tpcb")
	}
	b.ReportMetric(ms(h.eventP99), "event_p99_ms")
}

// TestHTTPLoadShort runs the harness for a few seconds at a low rate
// (make test), so that it cannot rot: every request must get a 2xx and
// every number must be produced. It asserts no timing.
func TestHTTPLoadShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole service as separate processes")
	}
	s := loadSettings(t, settings{users: 200, step: time.Second, pause: 200 * time.Millisecond, hold: 5 * time.Second, payRate: 5})
	c := startCluster(t)
	c.fund(s.users, 10_000_000_000)
	g := newTargets(c.apiURL, c.key, s.users)
	steps, best := search(g, balances, 20, 40, 1, s.step, s.pause, time.Minute, t.Logf)
	if best == nil || len(steps) == 0 {
		t.Fatalf("the rate search found nothing: %d steps", len(steps))
	}
	closed := closedLoop(g, withdrawals, 4, time.Second)
	t.Logf("withdrawal creations, 4 clients, closed loop: %d/s, p99 %.2f ms", closed.rate, ms(closed.all.quantile(0.99)))
	if closed.rate <= 0 || closed.all.failed() != 0 {
		t.Errorf("withdrawals, closed loop: %d/s, %d without a 2xx %s", closed.rate, closed.all.failed(), closed.all.failures())
	}
	tr := closedLoop(g, transfers, 4, time.Second)
	t.Logf("transfers, 4 clients, closed loop: %d/s, p99 %.2f ms", tr.rate, ms(tr.all.quantile(0.99)))
	if tr.rate <= 0 || tr.all.failed() != 0 {
		t.Errorf("transfers, closed loop: %d/s, %d without a 2xx %s", tr.rate, tr.all.failed(), tr.all.failures())
	}
	h := holdMix(t, c, g, 40, s)
	r := report{best: map[endpoint]*step{balances: best}, steps: map[endpoint][]*step{balances: steps}, hold: h}
	r.print(t.Logf)
	for _, e := range endpoints {
		st := h.step.by[e]
		if st.requests() == 0 || st.failed() != 0 || st.quantile(0.99) <= 0 {
			t.Errorf("%s: %d requests, %d without a 2xx (%s), p99 %s", e, st.requests(), st.failed(), st.failures(), st.quantile(0.99))
		}
	}
	if h.withdrawals["approved"] == 0 || len(h.withdrawals) != 1 {
		t.Errorf("withdrawals: %v, want every one auto-approved", h.withdrawals)
	}
	if h.pgCPU <= 0 {
		t.Errorf("PostgreSQL: cpu %.2f over %d backends", h.pgCPU, h.pgBackends)
	}
	if h.paid == 0 || len(h.events) == 0 || h.eventP99 <= 0 {
		t.Errorf("events: %d deposits paid, %d deposit.settled received, p99 %s", h.paid, len(h.events), h.eventP99)
	}
	for _, p := range h.procs {
		if p.rss <= 0 || p.cpu < 0 {
			t.Errorf("%s: cpu %.2f, rss %d", p.name, p.cpu, p.rss)
		}
	}
}

// held is what the hold measured.
type held struct {
	rate            int
	step            *step
	withdrawals     map[string]int // created, by status
	paid, payFailed int64
	payErr          string
	events          []time.Duration // deposit.settled: commit to the receiver's 2xx
	eventP50        time.Duration
	eventP99        time.Duration
	received        map[string]int // every event the receiver has, by type
	// backlog0 and backlog1: jobs not finished, by kind, as the hold
	// starts and as it ends.
	backlog0, backlog1 map[string]int
	// hooks0 and hooks1: the processor's webhooks, queued and failed, as
	// the hold starts and as it ends.
	hooks0, hooks1 simHookState
	procs          []procUse
	machineBusy    float64 // share of all cores busy, from /proc/stat
	pgCPU          float64 // cores, the PostgreSQL backends of the database
	pgBackends     int
	// statements: what PostgreSQL ran for the database during the hold,
	// from pg_stat_statements when the server has it (nil otherwise).
	statements *statementCount
	profiles   []string
}

// sustained reports whether the hold kept the p99 limit with every answer
// a 2xx at its rate.
func (h held) sustained() bool {
	return h.step != nil && h.step.all.failed() == 0 && h.step.all.quantile(0.99) <= p99Limit &&
		h.step.achieved() >= 0.95*float64(h.rate)
}

type procUse struct {
	name string
	cpu  float64 // cores
	rss  int64   // the largest seen, bytes
}

// holdMix runs the mix at rate for s.hold while the simulator pays up to
// s.payRate deposits a second, samples every process's CPU and memory, and
// then measures each deposit.settled event that was emitted during the
// hold from its commit to the receiver's 2xx.
func holdMix(tb testing.TB, c *cluster, g *targets, rate int, s settings) held {
	h := held{rate: rate}
	pay := newPayer(c.simURL, s.payRate)
	names := []string{"svc api", "svc worker", "svc simulator", "load generator (the benchmark)"}
	pids := []int{c.api.Pid(), c.worker.Pid(), c.sim.Pid(), os.Getpid()}
	first := make([]procStat, len(pids))
	peak := make([]int64, len(pids))
	sample := func() {
		for i, pid := range pids {
			if st, err := readProc(pid); err == nil {
				peak[i] = max(peak[i], st.rssBytes)
			}
		}
	}
	for i, pid := range pids {
		st, err := readProc(pid)
		if err != nil {
			tb.Fatalf("%s: %v", names[i], err)
		}
		first[i] = st
	}
	h.backlog0, h.hooks0 = jobBacklog(tb, c.dbURL), simHooks(tb, c)
	pg0 := pgBackends(tb, c.dbURL)
	stmts0 := pgStatements(tb, c.dbURL)
	busy0, total0 := machineCPU()
	done := make(chan struct{})
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	if s.pprofDir != "" {
		secs := max(1, int((s.hold - 5*time.Second).Seconds()))
		for _, p := range []struct{ name, url string }{{"api", c.apiPprof}, {"worker", c.workPprof}, {"simulator", c.simURL + "/_sim/debug/pprof"}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := filepath.Join(s.pprofDir, p.name+".cpu.pprof")
				if err := fetch(fmt.Sprintf("%s/profile?seconds=%d", p.url, secs), path); err != nil {
					tb.Errorf("profile of %s: %v", p.name, err)
					return
				}
				mu.Lock()
				h.profiles = append(h.profiles, path)
				mu.Unlock()
			}()
		}
	}
	start := time.Now()
	h.withdrawals = map[string]int{}
	h.step = attack(g, "", rate, s.hold, func(e endpoint, r *vegeta.Result) {
		switch {
		case e == deposits:
			pay.offer(r)
		case e == withdrawals && r.Code == http.StatusCreated:
			var w struct {
				Status string  `json:"status"`
				Reason *string `json:"approval_reason"`
			}
			_ = json.Unmarshal(r.Body, &w)
			if w.Reason != nil { // the setting that fired starts the reason
				w.Status += " (" + strings.SplitN(*w.Reason, ":", 2)[0] + ")"
			}
			h.withdrawals[w.Status]++
		}
	})
	end := time.Now()
	pay.close()
	close(done)
	wg.Wait()
	wall := end.Sub(start)
	busy1, total1 := machineCPU()
	// A backend that ended during the hold is missed; one that started
	// during it counts whole.
	pg1 := pgBackends(tb, c.dbURL)
	for pid, cpu := range pg1 {
		h.pgCPU += (cpu - pg0[pid]).Seconds() / wall.Seconds()
	}
	h.pgBackends = len(pg1)
	if stmts0 != nil {
		h.statements = stmts0.since(pgStatements(tb, c.dbURL))
	}
	if total1 > total0 {
		h.machineBusy = float64(busy1-busy0) / float64(total1-total0)
	}
	for i, pid := range pids {
		st, err := readProc(pid)
		if err != nil {
			tb.Fatalf("%s: %v", names[i], err)
		}
		h.procs = append(h.procs, procUse{name: names[i], cpu: (st.cpu - first[i].cpu).Seconds() / wall.Seconds(), rss: max(peak[i], st.rssBytes)})
	}
	if s.pprofDir != "" {
		for _, p := range []struct{ name, url string }{{"api", c.apiPprof}, {"worker", c.workPprof}} {
			if err := fetch(p.url+"/heap", filepath.Join(s.pprofDir, p.name+".heap.pprof")); err != nil {
				tb.Errorf("heap profile of %s: %v", p.name, err)
			}
		}
	}
	h.paid, h.payFailed = pay.paid.Load(), pay.failed.Load()
	if e, ok := pay.lastErr.Load().(string); ok {
		h.payErr = e
	}
	h.backlog1, h.hooks1 = jobBacklog(tb, c.dbURL), simHooks(tb, c)
	h.events, h.received = settledLatencies(tb, c, start, end, int(h.paid))
	if len(h.events) > 0 {
		slices.Sort(h.events)
		h.eventP50 = h.events[len(h.events)/2]
		h.eventP99 = h.events[min(len(h.events)-1, len(h.events)*99/100)]
	}
	return h
}

// settledLatencies waits (at most a minute) until the receiver has a
// deposit.settled for every deposit paid, or no new one arrives for 10 s,
// and returns, for the events created between from and to, the time from
// the event's created_at (taken inside the settling transaction, a few
// milliseconds before its commit) to the receiver's 2xx.
func settledLatencies(tb testing.TB, c *cluster, from, to time.Time, paid int) (lat []time.Duration, types map[string]int) {
	types = map[string]int{}
	type received struct {
		ID         string    `json:"id"`
		Type       string    `json:"type"`
		CreatedAt  string    `json:"created_at"`
		ReceivedAt time.Time `json:"received_at"`
	}
	read := func() []received {
		resp, err := http.Get(c.simURL + "/platform/events")
		if err != nil {
			tb.Fatalf("receiver: %v", err)
		}
		defer resp.Body.Close()
		var body struct {
			Events []received `json:"events"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			tb.Fatalf("receiver: %v", err)
		}
		var out []received
		clear(types)
		for _, e := range body.Events {
			types[e.Type]++
			if e.Type == "deposit.settled" {
				out = append(out, e)
			}
		}
		return out
	}
	var evs []received
	last, lastChange := -1, time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		evs = read()
		if len(evs) != last {
			last, lastChange = len(evs), time.Now()
		}
		if len(evs) >= paid || time.Since(lastChange) > 10*time.Second {
			break
		}
	}
	for _, e := range evs {
		at, err := time.Parse(time.RFC3339Nano, e.CreatedAt)
		if err != nil {
			tb.Fatalf("event %s: created_at %q: %v", e.ID, e.CreatedAt, err)
		}
		if at.Before(from) || at.After(to) {
			continue
		}
		lat = append(lat, e.ReceivedAt.Sub(at))
	}
	return lat, types
}

// pgBackends returns the CPU time so far of each server process connected
// to the database of u (PostgreSQL runs on this machine), by pid.
// simHookState is the simulator's webhook sender: deliveries queued, and
// deliveries that failed so far (each held back those after it until its
// retry, 10 s, then 1 min, then 10 min later).
type simHookState struct {
	Pending  int `json:"pendingWebhooks"`
	Failures int `json:"webhookFailures"`
}

func simHooks(tb testing.TB, c *cluster) simHookState {
	var st simHookState
	resp, err := http.Get(c.simURL + "/_sim/")
	if err != nil {
		tb.Fatalf("simulator: %v", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		tb.Fatalf("simulator: %v", err)
	}
	return st
}

// adminConn connects as the owner to the database of u.
func adminConn(tb testing.TB, u string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), dbtest.AdminURLOf(tb, u))
	if err != nil {
		tb.Fatalf("connect as the owner: %v", err)
	}
	return conn
}

// awaitQuiet waits, at most quietLimit, until what ran before has no
// work left behind it: no withdrawal waits for its payout to be sent
// (status approved) and the processor's webhook queue is down to a few
// deliveries (the simulator, as BTCPay, sends one delivery at a time, and
// a burst of payouts queues three each). Then it logs how long it waited,
// and what was left if it gave up.
func (c *cluster) awaitQuiet(logf func(string, ...any), before string) {
	ctx := context.Background()
	conn := adminConn(c.t, c.dbURL)
	defer conn.Close(ctx)
	t0 := time.Now()
	for {
		var approved int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM withdrawals WHERE status = 'approved'`).Scan(&approved); err != nil {
			c.t.Fatalf("payouts: %v", err)
		}
		hooks := simHooks(c.t, c).Pending
		quiet := approved == 0 && hooks <= quietHooks
		if quiet || time.Since(t0) > quietLimit {
			if !quiet || time.Since(t0) > 2*time.Second {
				logf("before %s: waited %s for the payouts and the processor's webhooks (%d withdrawals still approved, %d webhooks queued)",
					before, time.Since(t0).Round(time.Second), approved, hooks)
			}
			return
		}
		time.Sleep(time.Second)
	}
}

// confirmedBetween counts the withdrawals confirmed between from and to.
func confirmedBetween(tb testing.TB, u string, from, to time.Time) int {
	ctx := context.Background()
	conn := adminConn(tb, u)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM withdrawals WHERE status = 'confirmed' AND updated_at BETWEEN $1 AND $2`, from, to).Scan(&n); err != nil {
		tb.Fatalf("confirmed withdrawals: %v", err)
	}
	return n
}

// How quiet awaitQuiet waits for, and how long at most.
const (
	quietHooks = 50
	quietLimit = 3 * time.Minute
)

// jobBacklog counts the jobs not yet finished (available, scheduled,
// retryable or running), by kind.
func jobBacklog(tb testing.TB, u string) map[string]int {
	ctx := context.Background()
	conn := adminConn(tb, u)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT kind, count(*) FROM river_job
 WHERE state IN ('available', 'scheduled', 'retryable', 'running') GROUP BY kind`)
	if err != nil {
		tb.Fatalf("jobs: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			tb.Fatalf("jobs: %v", err)
		}
		out[k] = n
	}
	return out
}

func pgBackends(tb testing.TB, u string) map[int]time.Duration {
	ctx := context.Background()
	conn := adminConn(tb, u)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
	if err != nil {
		tb.Fatalf("backends: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		tb.Fatalf("backends: %v", err)
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if st, err := readProc(int(pid)); err == nil {
			out[int(pid)] = st.cpu
		}
	}
	return out
}

// loadAverage is the first three fields of /proc/loadavg: how much else
// the machine is running shows there.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// machineCPU reads the busy and total jiffies of all cores from /proc/stat.
func machineCPU() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

func fetch(url, path string) error {
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// report prints the results and the targets beside them.
type report struct {
	targets bool // print the targets beside the results
	tpcb    float64
	best    map[endpoint]*step
	steps   map[endpoint][]*step
	// balances10 is the best step of the balance reads' search at
	// balanceP99Limit (nil when it was not run or nothing met it).
	balances10 *step
	hold       held
	// searchRSS is the largest RSS of the api, the worker and the
	// simulator during the searches, overloaded steps included.
	searchRSS []int64
	// closed is withdrawal creations from 32 clients in closed loop, and
	// closedTPCB pgbench's TPC-B at 32 clients right before it (nil, 0:
	// not run).
	closed     *step
	closedTPCB float64
}

func (r report) print(logf func(string, ...any)) {
	logf("")
	logf("Highest arrival rate with p99 <= %s and every answer a 2xx (latencies at that rate):", p99Limit)
	logf("  %-22s %8s %9s %9s %9s %9s", "endpoint", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "requests")
	for _, e := range append(slices.Clone(endpoints), "") {
		steps, ok := r.steps[e]
		if !ok {
			continue
		}
		b := r.best[e]
		if b == nil {
			lowest := steps[0].rate
			for _, s := range steps {
				lowest = min(lowest, s.rate)
			}
			logf("  %-22s %8s (even the lowest rate tried, %d/s, missed)", name(e), "none", lowest)
			continue
		}
		logf("  %-22s %8d %9.2f %9.2f %9.2f %9d", name(e), b.rate, ms(b.all.quantile(0.5)), ms(b.all.quantile(0.99)),
			ms(b.all.quantile(0.999)), b.all.requests())
	}
	if m := r.best[""]; m != nil {
		logf("  the mix at %d/s, per endpoint:", m.rate)
		for _, e := range endpoints {
			st := m.by[e]
			logf("    %-20s %8.0f %9.2f %9.2f %9.2f %9d", e, float64(st.requests())/m.duration.Seconds(), ms(st.quantile(0.5)), ms(st.quantile(0.99)), ms(st.quantile(0.999)), st.requests())
		}
	}
	if r.tpcb > 0 {
		logf("pgbench TPC-B, 32 clients, same server, right before the load: %.0f tps", r.tpcb)
	}
	h := r.hold
	logf("")
	logf("The mix held at %d/s for %s (sent %.1f/s): p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, %d requests, %d without a 2xx %s",
		h.rate, h.step.duration, h.step.achieved(), ms(h.step.all.quantile(0.5)), ms(h.step.all.quantile(0.99)),
		ms(h.step.all.quantile(0.999)), h.step.all.requests(), h.step.all.failed(), h.step.all.failures())
	for _, e := range endpoints {
		st := h.step.by[e]
		logf("    %-20s p50 %7.2f ms, p99 %7.2f ms, p99.9 %7.2f ms, %6d requests, %d without a 2xx %s", e,
			ms(st.quantile(0.5)), ms(st.quantile(0.99)), ms(st.quantile(0.999)), st.requests(), st.failed(), st.failures())
	}
	logf("  withdrawals created, by status: %v", h.withdrawals)
	logf("  deposits paid at the simulator: %d (%d payments failed %s); deposit.settled events emitted during the hold and received: %d",
		h.paid, h.payFailed, h.payErr, len(h.events))
	logf("  events the receiver has from the whole run, by type: %v", h.received)
	logf("  jobs not finished, by kind: as the hold started %v; as it ended %v", h.backlog0, h.backlog1)
	logf("  processor webhooks queued at the simulator / failed deliveries so far: as the hold started %d / %d; as it ended %d / %d",
		h.hooks0.Pending, h.hooks0.Failures, h.hooks1.Pending, h.hooks1.Failures)
	logf("  event latency, settlement commit to the receiver's 2xx: p50 %.1f ms, p99 %.1f ms", ms(h.eventP50), ms(h.eventP99))
	logf("  CPU (cores, of 2) and largest RSS during the hold; all cores %.0f%% busy:", 100*h.machineBusy)
	var apiRSS int64
	logf("    %-32s cpu %.2f", fmt.Sprintf("PostgreSQL (%d backends)", h.pgBackends), h.pgCPU)
	for _, p := range h.procs {
		logf("    %-32s cpu %.2f  rss %6.1f MB", p.name, p.cpu, float64(p.rss)/(1<<20))
		if p.name == "svc api" {
			apiRSS = p.rss
		}
	}
	h.statements.print(logf, h.step.all.requests())
	if len(r.searchRSS) == 3 {
		logf("  largest RSS during the rate searches (overloaded steps included; the hold ran on a restarted api and worker): api %.1f MB, worker %.1f MB, simulator %.1f MB",
			float64(r.searchRSS[0])/(1<<20), float64(r.searchRSS[1])/(1<<20), float64(r.searchRSS[2])/(1<<20))
	}
	for _, p := range h.profiles {
		logf("  profile: %s", p)
	}

	if !r.targets {
		return
	}
	logf("")
	logf("Targets:")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	if _, ok := r.steps[""]; !ok {
		logf("  the mix >= 1000 req/s at p99 <= 50 ms: no rate search; held for %s at %d req/s: p99 %.1f ms: %s",
			h.step.duration, h.rate, ms(h.step.all.quantile(0.99)), verdict(h.sustained() && h.rate >= 1000))
	} else {
		rate := 0
		if b := r.best[""]; b != nil {
			rate = b.rate
		}
		kept := 0
		if h.sustained() {
			kept = h.rate
		}
		logf("  the mix >= 1000 req/s at p99 <= 50 ms: %d req/s in a %s step, %d req/s held for %s: %s",
			rate, r.steps[""][0].duration, kept, h.step.duration, verdict(rate >= 1000 && kept >= 1000))
	}
	if steps, ok := r.steps[balances]; ok {
		best10 := 0
		for _, s := range steps {
			if s.all.failed() == 0 && s.all.quantile(0.99) <= balanceP99Limit && s.achieved() >= 0.95*float64(s.rate) {
				best10 = max(best10, s.rate)
			}
		}
		if r.balances10 != nil {
			best10 = max(best10, r.balances10.rate)
		}
		logf("  balance reads >= 5000 req/s at p99 <= 10 ms: highest rate met with p99 <= 10 ms: %d req/s: %s", best10, verdict(best10 >= 5000))
	}
	if w := r.closed; w != nil && r.closedTPCB > 0 {
		open := 0
		if b := r.best[withdrawals]; b != nil {
			open = b.rate
		}
		// Against the higher of the two TPC-B readings: a reference that
		// work left over on the server lowered would flatter the ratio.
		ref := max(r.closedTPCB, r.tpcb)
		logf("  withdrawal creations >= 50%% of TPC-B at 32 clients: %d req/s from 32 clients = %.0f%% of %.0f tps (TPC-B right before: %.0f; open loop at p99 <= 50 ms: %d req/s = %.0f%% of %.0f): %s",
			w.rate, 100*float64(w.rate)/ref, ref, r.closedTPCB, open, 100*float64(open)/max(1, r.tpcb), r.tpcb,
			verdict(w.all.failed() == 0 && float64(w.rate) >= 0.5*ref))
	}
	logf("  event first attempt <= 2 s after commit at p99: %.1f ms: %s", ms(h.eventP99), verdict(len(h.events) > 0 && h.eventP99 <= 2*time.Second))
	logf("  api RSS <= 150 MB: %.1f MB: %s", float64(apiRSS)/(1<<20), verdict(apiRSS > 0 && apiRSS <= 150<<20))
}

// statementCount is what pg_stat_statements counted for one database:
// calls by statement text (normalized by the extension).
type statementCount struct {
	calls map[string]int64
}

// pgStatements reads pg_stat_statements for the database of u, when the
// server loads it (shared_preload_libraries, an operator's choice; the
// benchmark turns nothing on in the server): the extension is created in
// the benchmark's own database. nil when it is not there.
func pgStatements(tb testing.TB, u string) *statementCount {
	ctx := context.Background()
	conn := adminConn(tb, u)
	defer conn.Close(ctx)
	var loaded bool
	if err := conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'`).Scan(&loaded); err != nil || !loaded {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT query, sum(calls)::bigint FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY query`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := &statementCount{calls: map[string]int64{}}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return nil
		}
		out.calls[q] = n
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// since returns the calls counted between c and later.
func (c *statementCount) since(later *statementCount) *statementCount {
	if later == nil {
		return nil
	}
	out := &statementCount{calls: map[string]int64{}}
	for q, n := range later.calls {
		if d := n - c.calls[q]; d > 0 {
			out.calls[q] = d
		}
	}
	return out
}

// print logs the statements per request of the hold: all of them, the
// transactions (COMMIT), and the most called.
func (c *statementCount) print(logf func(string, ...any), requests int) {
	if c == nil || requests == 0 {
		return
	}
	type stmt struct {
		q string
		n int64
	}
	var all []stmt
	var total, commits int64
	for q, n := range c.calls {
		total += n
		switch strings.ToLower(strings.TrimSpace(q)) {
		case "commit", "end":
			commits += n
		}
		all = append(all, stmt{q, n})
	}
	slices.SortFunc(all, func(a, b stmt) int { return cmp.Compare(b.n, a.n) })
	per := func(n int64) float64 { return float64(n) / float64(requests) }
	logf("  PostgreSQL statements during the hold (pg_stat_statements), per request of the mix: %.2f, of which %.2f transactions (COMMIT); the most called:",
		per(total), per(commits))
	for _, s := range all[:min(len(all), 12)] {
		q := strings.Join(strings.Fields(s.q), " ")
		if len(q) > 110 {
			q = q[:110] + "..."
		}
		logf("    %6.2f  %s", per(s.n), q)
	}
}
