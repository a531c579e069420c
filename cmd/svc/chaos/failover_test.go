package chaos

import (
	"context"
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

	"github.com/uptrace/bun/dialect/pgdialect"

	"svc/platform/dbtest"
)

// failoverSettings are a failover run's own settings (make failover sets
// them; make test runs the short defaults: one failover and the fail-back,
// the harness promoting the standby itself).
type failoverSettings struct {
	count      int           // failovers (each one kills the primary of the moment)
	load       time.Duration // of mixed load before each kill
	syncCommit string        // the primary's synchronous_commit
	manager    string        // manual, or pg_auto_failover
	// pafDefaults keeps pg_auto_failover's own detection settings.
	pafDefaults bool
}

const (
	managerManual = "manual"
	managerPAF    = "pg_auto_failover"
)

func loadFailoverSettings(t *testing.T) failoverSettings {
	s := failoverSettings{count: 2, load: 4 * time.Second, syncCommit: "on", manager: managerManual}
	if v := os.Getenv("FAILOVER_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FAILOVER_COUNT=%q: a positive number", v)
		}
		s.count = n
	}
	if v := os.Getenv("FAILOVER_LOAD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAILOVER_LOAD=%q: %v", v, err)
		}
		s.load = d
	}
	if v := os.Getenv("FAILOVER_SYNC_COMMIT"); v != "" {
		s.syncCommit = v
	}
	switch v := os.Getenv("FAILOVER_MANAGER"); v {
	case "", managerManual:
	case managerPAF:
		s.manager = v
	default:
		t.Fatalf("FAILOVER_MANAGER=%q: %s or %s", v, managerManual, managerPAF)
	}
	switch v := os.Getenv("FAILOVER_PAF_TIMEOUTS"); v {
	case "", "tuned":
	case "default":
		s.pafDefaults = true
	default:
		t.Fatalf("FAILOVER_PAF_TIMEOUTS=%q: tuned or default", v)
	}
	return s
}

// pgManager is what fails the database over in a run: the harness itself
// (manual) or pg_auto_failover's monitor.
type pgManager interface {
	// start starts the servers: the cluster's database.
	start(t testing.TB) (*dbtest.PrivateServer, string, string, string)
	// names are the primary's and the standby's names now.
	names() (primary, standby string)
	// kill loses the primary (sets r.killed).
	kill(r *failoverRound)
	// promote returns once the standby accepts writes (sets r.promoted,
	// and what the monitor decided when).
	promote(r *failoverRound)
	// failBack brings the old primary back as the new primary's
	// synchronous standby and swaps the two (sets r.rebuild, r.rebuilt,
	// r.resynced).
	failBack(r *failoverRound)
}

// newManager is fs's manager; dir is where the run keeps its logs.
func newManager(fs failoverSettings, dir string) pgManager {
	if fs.manager == managerPAF {
		return &pafManager{fs: fs, logs: dir}
	}
	return &manualManager{fs: fs}
}

// manualManager plays the failover tool with no detection: pg_ctl promote
// of the standby at once after the kill (scripts/db.sh), pg_rewind of the
// old primary into the new standby. Its figures are what the service
// itself adds.
type manualManager struct {
	fs               failoverSettings
	primary, standby *dbtest.PrivateServer
}

func (m *manualManager) start(t testing.TB) (*dbtest.PrivateServer, string, string, string) {
	a := dbtest.StartReplicatedServer(t)
	a.Name = "a"
	owner, runtime := a.Roles() // roles replicate: made once, on the primary
	b := a.StartStandby(dbtest.StandbyOptions{Name: "b"})
	a.SetSynchronous(m.fs.syncCommit, "b")
	a.WaitStreaming("b", true)
	m.primary, m.standby = a, b
	return a, dbtest.MultiHostURL(owner, a, b), dbtest.MultiHostURL(runtime, a, b), dbtest.MultiHostURL(a.URL, a, b)
}

func (m *manualManager) names() (string, string) { return m.primary.Name, m.standby.Name }

func (m *manualManager) kill(r *failoverRound) {
	m.primary.Kill()
	r.killed = time.Since(r.killedAt)
}

func (m *manualManager) promote(r *failoverRound) {
	m.standby.Promote()
	r.promoted = time.Since(r.killedAt)
}

// failBack rebuilds the old primary as the new standby and makes it
// synchronous. Until then the new primary commits without waiting for a
// standby (there is none to wait for): see docs/reliability.md.
func (m *manualManager) failBack(r *failoverRound) {
	old, next := m.primary, m.standby
	start := time.Now()
	r.rebuild = old.RebuildAsStandby(next)
	r.rebuilt = time.Since(start)
	next.SetSynchronous(m.fs.syncCommit, old.Name)
	next.WaitStreaming(old.Name, true)
	r.resynced = time.Since(start)
	m.primary, m.standby = next, old
}

// pafManager runs the servers as a pg_auto_failover formation: a monitor
// and two keeper-managed nodes (scripts/autofailover.sh). A round loses
// the primary's host (its keeper and its PostgreSQL killed together) and
// waits for the monitor to notice and promote the standby; the fail-back
// starts the old node's keeper again, which rewinds it into the new
// standby, as a host coming back would.
type pafManager struct {
	t                testing.TB
	fs               failoverSettings
	logs             string // the run's log folder
	f                *dbtest.AutoFailover
	primary, standby *dbtest.AutoNode
}

func (m *pafManager) start(t testing.TB) (*dbtest.PrivateServer, string, string, string) {
	m.t = t
	m.f = dbtest.StartAutoFailover(t, dbtest.AutoFailoverOptions{DefaultTimeouts: m.fs.pafDefaults})
	if os.Getenv("CHAOS_KEEP") != "" {
		// Before the formation stops and its folder goes (cleanups run last
		// in, first out).
		t.Cleanup(func() {
			if err := m.f.CopyLogs(filepath.Join(m.logs, "pg_auto_failover")); err != nil {
				t.Logf("copying pg_auto_failover's logs: %v", err)
			}
		})
	}
	a := m.f.AddNode("a")
	a.SetSynchronousCommit(m.fs.syncCommit) // before b: its base backup copies it
	owner, runtime := a.Roles()
	b := m.f.AddNode("b")
	m.f.WaitStates(2*time.Minute, map[string]string{"a": "primary", "b": "secondary"})
	a.WaitStreaming(b.ApplicationName(), true)
	m.primary, m.standby = a, b
	pa, pb := a.PrivateServer, b.PrivateServer
	return pa, dbtest.MultiHostURL(owner, pa, pb), dbtest.MultiHostURL(runtime, pa, pb), dbtest.MultiHostURL(pa.URL, pa, pb)
}

func (m *pafManager) names() (string, string) { return m.primary.Name, m.standby.Name }

func (m *pafManager) kill(r *failoverRound) {
	m.primary.KillHost()
	r.killed = time.Since(r.killedAt)
}

// promote waits until the standby accepts writes (the keeper promotes it
// read-only, and allows writes once the monitor has waited
// primary_demote_timeout for the old primary), then reads from the
// monitor's events when it marked the old primary unhealthy (its health
// checks) and when it started the failover (the old primary's goal set to
// draining).
func (m *pafManager) promote(r *failoverRound) {
	for !m.standby.AcceptsWrites() {
		if time.Since(r.killedAt) > 5*time.Minute {
			m.t.Fatalf("%s not promoted 5 minutes after %s was killed; the monitor has %v", m.standby.Name, m.primary.Name, m.f.States())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.promoted = time.Since(r.killedAt)
	for _, e := range m.f.Events(r.killedAt) {
		switch {
		case e.Node != m.primary.Name:
		case r.unhealthy == 0 && strings.Contains(e.About, "marked as unhealthy"):
			r.unhealthy = e.At.Sub(r.killedAt)
		case r.decided == 0 && e.Goal == "draining":
			r.decided = e.At.Sub(r.killedAt)
		}
	}
}

func (m *pafManager) failBack(r *failoverRound) {
	old, next := m.primary, m.standby
	start := time.Now()
	from := old.StartKeeper()
	m.f.WaitStates(5*time.Minute, map[string]string{old.Name: "secondary"})
	r.rebuilt = time.Since(start)
	r.rebuild = old.RebuildMethod(from)
	m.f.WaitStates(5*time.Minute, map[string]string{old.Name: "secondary", next.Name: "primary"})
	next.WaitStreaming(old.ApplicationName(), true)
	r.resynced = time.Since(start)
	m.primary, m.standby = next, old
}

// TestFailover runs the whole service on a PostgreSQL primary with a
// synchronous streaming standby, both named in every process's
// DATABASE_URL (target_session_attrs=read-write), under mixed load. Each
// round kills the primary (kill -9), waits for the standby to be promoted,
// measures the time from the kill to the first 2xx of a write, checks that
// every write acknowledged before the kill is still there and answers the
// same, and brings the old primary back as the new synchronous standby, so
// the next round fails back. No svc process is restarted.
// FAILOVER_MANAGER chooses who promotes: the harness at once (manual, the
// default: pg_ctl promote, pg_rewind) or pg_auto_failover's monitor, which
// detects the loss of the primary's host by itself. docs/reliability.md
// has the method and the figures.
func TestFailover(t *testing.T) {
	// Its own primary, standby and cluster: it runs beside the other
	// scenarios.
	t.Parallel()
	s := loadSettings(t)
	fs := loadFailoverSettings(t)
	dir := scenarioDir(t)
	t.Logf("failover seed %d, %d failovers after %s of load each, synchronous_commit=%s, manager %s", s.seed, fs.count, fs.load, fs.syncCommit, fs.manager)

	began := time.Now()
	m := newManager(fs, dir)
	c := startClusterOn(t, dir, m.start)
	pids := map[string]int{}
	for _, p := range c.procs() {
		pids[p.Name] = p.Pid()
	}
	v := &violations{}
	o := &oracle{c: c, v: v}
	d := newDriver(t, c, v, s.seed)
	d.waitAssets(t)
	t.Logf("cluster up and assets enabled after %s", time.Since(began).Round(time.Millisecond))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go o.watch(watchCtx, 5*time.Second)
	actors := d.run(ctx, s.actors)

	var rounds []failoverRound
	checked := 0              // acks replayed so far
	lost := map[string]bool{} // acknowledged deposits and withdrawals found missing
	for i := 0; i < fs.count; i++ {
		time.Sleep(fs.load)
		r := failoverOnce(t, d, v, m, fmt.Sprintf("failover-%d-%d", s.seed, i))
		checkStart := time.Now()
		checked = checkAcks(d, v, o, checked, r.killedAt, &r, lost)
		t.Logf("round %d: acknowledged writes checked in %s", i+1, time.Since(checkStart).Round(time.Millisecond))
		for _, p := range c.procs() {
			if !p.Alive() || p.Pid() != pids[p.Name] {
				v.add("round %d: %s is not the process started at the beginning (restarted or exited; log %s)", i+1, p.Name, p.Log)
			}
		}
		for _, p := range c.apis {
			if err := p.WaitReady(30 * time.Second); err != nil {
				v.add("round %d: %s /healthz not ok 30 s after the failover: %v", i+1, p.Name, err)
			}
			if body, ok := waitReady(strings.TrimSuffix(p.Ready, "/healthz")+"/readyz", 30*time.Second); !ok {
				v.add("round %d: %s /readyz not ok 30 s after the failover: %s", i+1, p.Name, body)
			}
		}
		if !o.books(context.Background()) {
			v.add("round %d: the oracle could not read the new primary", i+1)
		}
		t.Logf("round %d: %s", i+1, r)
		rounds = append(rounds, r)
	}
	stop()
	actors.Wait()

	settleStart := time.Now()
	settleCtx, settled := context.WithCancel(context.Background())
	go func() {
		for {
			select {
			case <-settleCtx.Done():
				return
			case <-time.After(10 * time.Second):
				if l, err := o.unsettled(settleCtx); err == nil && len(l) > 0 {
					t.Logf("settling for %s: %d open, the first %s", time.Since(settleStart).Round(time.Second), len(l), l[0])
				}
			}
		}
	}()
	left := d.settle(o, s.settle)
	settled()
	stopWatch()
	for _, l := range left {
		v.add("after %s of settling: %s", s.settle, l)
	}
	final := context.Background()
	if !o.books(final) {
		v.add("the final ledger check could not read the database")
	}
	nEvents := o.settledChecks(final, d, v)
	for _, p := range c.procs() {
		if !p.Alive() || p.Pid() != pids[p.Name] {
			v.add("%s is not the process started at the beginning (log %s)", p.Name, p.Log)
		}
	}
	missing, err := missingWrites(o, d.ackedIDs())
	if err != nil {
		v.add("the acknowledged writes could not be read at the end: %v", err)
	}
	if len(missing) > 0 {
		v.add("at the end, %d acknowledged deposits and withdrawals are not in the database: %v", len(missing), missing)
	}
	for _, id := range missing {
		lost[id] = true
	}
	o.mu.Lock()
	dup := duplicates{strays: o.strays, payouts: o.extraPayouts}
	o.mu.Unlock()
	d.mu.Lock()
	dup.replays = d.ops[replayDiffered]
	d.mu.Unlock()

	summary := fmt.Sprintf("seed %d: %d failovers (synchronous_commit=%s, manager %s), settled in %s\n%s\n  %s\n  %s\n  events delivered %d, book checks %d, violations %d",
		s.seed, len(rounds), fs.syncCommit, fs.manager, time.Since(settleStart).Round(time.Second),
		failoverTable(fs, rounds, len(lost), dup), failoverFigures(rounds), d.summary(), nEvents, o.checks, len(v.all()))
	t.Log(summary)
	var lines []string
	for i, r := range rounds {
		lines = append(lines, fmt.Sprintf("round %d: %s", i+1, r))
	}
	_ = os.WriteFile(filepath.Join(dir, "failover.txt"), []byte(summary+"\n\n"+strings.Join(lines, "\n")+"\n"), 0o644)
	if list := v.all(); len(list) > 0 {
		t.Errorf("%d invariant violations (seed %d):\n%s", len(list), s.seed, strings.Join(list, "\n"))
	}
}

// failoverRound is what one failover measured.
type failoverRound struct {
	from, to    string        // the killed primary's and the promoted standby's names
	killedAt    time.Time     // when the primary was killed
	killed      time.Duration // until the old primary's processes were all gone
	unhealthy   time.Duration // pg_auto_failover: from the kill to the monitor marking the primary unhealthy
	decided     time.Duration // pg_auto_failover: from the kill to the monitor starting the failover
	promoted    time.Duration // from the kill to the standby accepting read-write sessions
	firstWrite  time.Duration // from the kill to the first 2xx of a write
	probe503    int           // the probe's 503 answers before that
	driver503   int           // the driver's 503 answers in the same window
	ackedBefore int           // writes acknowledged before the kill, all checked
	replayed    int           // acknowledged writes replayed after the failover
	missing     int           // acknowledged deposits and withdrawals not on the new primary
	rebuild     string        // pg_rewind or pg_basebackup
	rebuilt     time.Duration // until the old primary is a standby again
	resynced    time.Duration // until it is synchronous again (both from the start of the rebuild)
}

func (r failoverRound) String() string {
	monitor := ""
	if r.decided > 0 {
		monitor = fmt.Sprintf("monitor: primary unhealthy %s, failover started %s after the kill; ", r.unhealthy.Round(time.Millisecond), r.decided.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s -> %s: processes gone %s, %spromoted %s, first write 2xx %s after the kill (503 answers: probe %d, load %d); %d writes acknowledged before the kill checked (%d missing), %d replayed; old primary rebuilt with %s in %s, synchronous again after %s",
		r.from, r.to, r.killed.Round(time.Millisecond), monitor, r.promoted.Round(time.Millisecond), r.firstWrite.Round(time.Millisecond), r.probe503, r.driver503,
		r.ackedBefore, r.missing, r.replayed, r.rebuild, r.rebuilt.Round(time.Millisecond), r.resynced.Round(time.Millisecond))
}

// failoverOnce kills the primary, waits for the standby's promotion, and
// for a write to succeed through the balancer, then brings the old primary
// back as the new synchronous standby.
func failoverOnce(t *testing.T, d *driver, v *violations, m pgManager, key string) failoverRound {
	t.Helper()
	var r failoverRound
	r.from, r.to = m.names()
	d.mu.Lock()
	before503 := d.statuses[http.StatusServiceUnavailable]
	d.mu.Unlock()

	r.killedAt = time.Now()
	m.kill(&r)
	probe := make(chan probeResult, 1)
	go func() { probe <- d.probeWrite(r.killedAt, key, 5*time.Minute) }()
	m.promote(&r)
	p := <-probe
	r.firstWrite, r.probe503 = p.after, p.unavailable
	d.mu.Lock()
	r.driver503 = d.statuses[http.StatusServiceUnavailable] - before503
	d.mu.Unlock()
	if !p.ok {
		v.add("%s -> %s: no write succeeded within 5 minutes of the kill", r.from, r.to)
	}
	for _, s := range p.bad {
		v.add("%s -> %s: during the failover the probe got %s", r.from, r.to, s)
	}
	m.failBack(&r)
	return r
}

type probeResult struct {
	ok          bool
	after       time.Duration
	unavailable int
	bad         []string
}

// probeWrite creates a deposit with one Idempotency-Key every 50 ms from
// since until it is answered 2xx (the write reached the new primary), and
// counts the answers before. Only 503 is a right answer meanwhile. The
// deposit joins the driver's, so the final checks count it.
func (d *driver) probeWrite(since time.Time, idem string, within time.Duration) probeResult {
	var res probeResult
	body := []byte(`{"external_user_id":"probe","asset":"BTC","expected_amount":"100000"}`)
	for time.Since(since) < within {
		resp, err := d.send(http.MethodPost, "/v1/deposits", body, d.c.rwKey, idem)
		switch {
		case err != nil || resp.header.Get(balancerHeader) != "":
		case resp.status == http.StatusCreated:
			res.ok, res.after = true, time.Since(since)
			var dp struct {
				ID      string  `json:"deposit_id"`
				Address *string `json:"address"`
			}
			if err := (response{status: resp.status, body: resp.body}).decode(&dp); err == nil && dp.ID != "" {
				x := &dep{id: dp.ID, asset: "BTC"}
				if dp.Address != nil {
					x.address = *dp.Address
				}
				d.mu.Lock()
				d.deposits = append(d.deposits, x)
				d.mu.Unlock()
			}
			return res
		case resp.status == http.StatusServiceUnavailable:
			res.unavailable++
			if resp.header.Get("Retry-After") == "" {
				res.bad = append(res.bad, "a 503 without Retry-After")
			}
		default:
			res.bad = append(res.bad, fmt.Sprintf("%d %s", resp.status, excerpt(resp.body)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return res
}

// checkAcks checks the writes acknowledged since the last check (from
// index from): each deposit and withdrawal the API answered 2xx with is
// in the new primary (those that are not join lost), and each
// acknowledged request, sent again with its key, answers the same status
// and body (the key's record survived; a lost one would make a second
// effect). It returns the new index.
func checkAcks(d *driver, v *violations, o *oracle, from int, killedAt time.Time, r *failoverRound, lost map[string]bool) int {
	d.mu.Lock()
	acks := slices.Clone(d.acks[from:])
	d.mu.Unlock()
	for _, a := range acks {
		if a.at.Before(killedAt) {
			r.ackedBefore++
		}
	}

	ids := d.ackedIDs()
	missing, err := missingWrites(o, ids)
	switch {
	case err != nil:
		v.add("%s -> %s: the acknowledged writes could not be read: %s", r.from, r.to, excerpt([]byte(err.Error())))
	case len(missing) > 0:
		v.add("%s -> %s: %d deposits and withdrawals were acknowledged, the new primary lacks %d of them: %v", r.from, r.to, len(ids), len(missing), missing)
	}
	r.missing = len(missing)
	for _, id := range missing {
		lost[id] = true
	}

	// Replayed a few at a time, as the load goes on.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, a := range acks {
		wg.Add(1)
		sem <- struct{}{}
		go func(a ack) {
			defer wg.Done()
			defer func() { <-sem }()
			d.replay(a.method, a.path, a.raw, a.key, a.idem, a.first)
		}(a)
	}
	wg.Wait()
	r.replayed = len(acks)
	return from + len(acks)
}

// ackedIDs are the deposits and withdrawals the API answered with.
func (d *driver) ackedIDs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for _, x := range d.deposits {
		ids = append(ids, x.id)
	}
	for _, w := range d.wds {
		ids = append(ids, w.id)
	}
	return ids
}

// missingWrites are the ids of ids that neither the deposits nor the
// withdrawals hold, read on the primary (30 tries a second apart while it
// cannot be read).
func missingWrites(o *oracle, ids []string) ([]string, error) {
	var found []string
	var err error
	for i := 0; i < 30; i++ {
		found = found[:0]
		err = o.c.db.Bun.NewRaw(`SELECT id::text FROM deposits WHERE id = ANY(?::uuid[]) UNION ALL SELECT id::text FROM withdrawals WHERE id = ANY(?::uuid[])`,
			pgdialect.Array(ids), pgdialect.Array(ids)).Scan(context.Background(), &found)
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(found))
	for _, id := range found {
		have[id] = true
	}
	var missing []string
	for _, id := range ids {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// waitReady waits until url answers 200 and returns the last body seen.
func waitReady(url string, within time.Duration) (string, bool) {
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return "", true
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, excerpt(b))
	}
	return last, false
}

// quantile is the p-quantile of sorted l (nearest rank), to the
// millisecond.
func quantile(l []time.Duration, p float64) time.Duration {
	i := int(float64(len(l))*p+0.999999) - 1
	return l[max(0, min(i, len(l)-1))].Round(time.Millisecond)
}

func sortedOf(rounds []failoverRound, f func(failoverRound) time.Duration) []time.Duration {
	var l []time.Duration
	for _, r := range rounds {
		l = append(l, f(r))
	}
	slices.Sort(l)
	return l
}

// failoverFigures is the p50, p99 and max of the rounds' times to the
// first 2xx and to the promotion (and to the monitor's decision), and the
// 503s answered meanwhile.
func failoverFigures(rounds []failoverRound) string {
	if len(rounds) == 0 {
		return "no failover"
	}
	first := sortedOf(rounds, func(r failoverRound) time.Duration { return r.firstWrite })
	prom := sortedOf(rounds, func(r failoverRound) time.Duration { return r.promoted })
	var p503, d503 int
	for _, r := range rounds {
		p503 += r.probe503
		d503 += r.driver503
	}
	monitor := ""
	if rounds[0].decided > 0 {
		dec := sortedOf(rounds, func(r failoverRound) time.Duration { return r.decided })
		monitor = fmt.Sprintf("; kill to the monitor's failover: p50 %s, max %s", quantile(dec, 0.5), dec[len(dec)-1].Round(time.Millisecond))
	}
	return fmt.Sprintf("kill to first write 2xx: p50 %s, p99 %s, max %s over %d failovers (kill to promoted: p50 %s, max %s%s); 503 answers during failovers: probe %d, load %d",
		quantile(first, 0.5), quantile(first, 0.99), first[len(first)-1].Round(time.Millisecond), len(rounds), quantile(prom, 0.5), prom[len(prom)-1].Round(time.Millisecond), monitor, p503, d503)
}

// duplicates are the second effects a run found: deposits and withdrawals
// in the database that no answer named, processor payouts beyond a
// withdrawal's first, and replays whose answer differed from the first.
type duplicates struct{ strays, payouts, replays int }

func (d duplicates) total() int { return d.strays + d.payouts + d.replays }

// failoverTable is the run's figures as the table docs/deployment.md
// shows.
func failoverTable(fs failoverSettings, rounds []failoverRound, lost int, dup duplicates) string {
	if len(rounds) == 0 {
		return "no failover"
	}
	first := sortedOf(rounds, func(r failoverRound) time.Duration { return r.firstWrite })
	var p503, d503 int
	for _, r := range rounds {
		p503 += r.probe503
		d503 += r.driver503
	}
	manager := fs.manager
	if fs.manager == managerPAF && fs.pafDefaults {
		manager += " (default timeouts)"
	}
	return fmt.Sprintf(`| manager | synchronous_commit | failovers and fail-backs | kill to first 2xx write, p50 / p99 | acknowledged writes lost | duplicates | 503 answers (probe / load) |
|---|---|---|---|---|---|---|
| %s | %s | %d | %s / %s | %d | %d (unanswered rows %d, second payouts %d, replays that differed %d) | %d / %d |`,
		manager, fs.syncCommit, len(rounds), quantile(first, 0.5), quantile(first, 0.99), lost,
		dup.total(), dup.strays, dup.payouts, dup.replays, p503, d503)
}
