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
// them; make test runs the short defaults: one failover and the fail-back).
type failoverSettings struct {
	count      int           // failovers (each one kills the primary of the moment)
	load       time.Duration // of mixed load before each kill
	syncCommit string        // the primary's synchronous_commit
}

func loadFailoverSettings(t *testing.T) failoverSettings {
	s := failoverSettings{count: 2, load: 4 * time.Second, syncCommit: "on"}
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
	return s
}

// pgPair is a primary and its synchronous standby; they swap at each
// failover.
type pgPair struct{ primary, standby *dbtest.PrivateServer }

// TestFailover runs the whole service on a PostgreSQL primary with a
// synchronous streaming standby, both named in every process's
// DATABASE_URL (target_session_attrs=read-write), under mixed load. Each
// round kills the primary's postmaster (kill -9), promotes the standby as
// a failover tool would, measures the time from the kill to the first 2xx
// of a write, checks that every write acknowledged before the kill is
// still there and answers the same, and rebuilds the old primary as the
// new synchronous standby (pg_rewind), so the next round fails back. No
// svc process is restarted. docs/reliability.md has the method and the
// figures.
func TestFailover(t *testing.T) {
	// Its own primary, standby and cluster: it runs beside the other
	// scenarios.
	t.Parallel()
	s := loadSettings(t)
	fs := loadFailoverSettings(t)
	dir := scenarioDir(t)
	t.Logf("failover seed %d, %d failovers after %s of load each, synchronous_commit=%s", s.seed, fs.count, fs.load, fs.syncCommit)

	began := time.Now()
	var pair pgPair
	c := startClusterOn(t, dir, func(t testing.TB) (*dbtest.PrivateServer, string, string, string) {
		a := dbtest.StartReplicatedServer(t)
		a.Name = "a"
		owner, runtime := a.Roles() // roles replicate: made once, on the primary
		b := a.StartStandby(dbtest.StandbyOptions{Name: "b"})
		a.SetSynchronous(fs.syncCommit, "b")
		a.WaitStreaming("b", true)
		pair = pgPair{primary: a, standby: b}
		return a, dbtest.MultiHostURL(owner, a, b), dbtest.MultiHostURL(runtime, a, b), dbtest.MultiHostURL(a.URL, a, b)
	})
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
	checked := 0 // acks replayed so far
	for i := 0; i < fs.count; i++ {
		time.Sleep(fs.load)
		r := failoverOnce(t, c, d, v, &pair, fmt.Sprintf("failover-%d-%d", s.seed, i), fs.syncCommit)
		checkStart := time.Now()
		checked = checkAcks(d, v, o, checked, r.killedAt, &r)
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

	summary := fmt.Sprintf("seed %d: %d failovers (synchronous_commit=%s), settled in %s\n  %s\n  %s\n  events delivered %d, book checks %d, violations %d",
		s.seed, len(rounds), fs.syncCommit, time.Since(settleStart).Round(time.Second), failoverFigures(rounds), d.summary(),
		nEvents, o.checks, len(v.all()))
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
	from, to         string        // the killed primary's and the promoted standby's names
	killedAt         time.Time     // when the postmaster was killed
	killed           time.Duration // until the old primary's processes were all gone
	promoted         time.Duration // from the kill to the end of pg_ctl promote
	firstWrite       time.Duration // from the kill to the first 2xx of a write
	probe503         int           // the probe's 503 answers before that
	driver503        int           // the driver's 503 answers in the same window
	ackedBefore      int           // writes acknowledged before the kill, all checked
	replayed         int           // acknowledged writes replayed after the failover
	rebuild          string        // pg_rewind or pg_basebackup
	rebuilt, resynce time.Duration // the rebuild, and until the rebuilt standby is synchronous again
}

func (r failoverRound) String() string {
	return fmt.Sprintf("%s -> %s: processes gone %s, promoted %s, first write 2xx %s after the kill (503 answers: probe %d, load %d); %d writes acknowledged before the kill checked, %d replayed; old primary rebuilt with %s in %s, synchronous again after %s",
		r.from, r.to, r.killed.Round(time.Millisecond), r.promoted.Round(time.Millisecond), r.firstWrite.Round(time.Millisecond), r.probe503, r.driver503,
		r.ackedBefore, r.replayed, r.rebuild, r.rebuilt.Round(time.Millisecond), r.resynce.Round(time.Millisecond))
}

// failoverOnce kills the primary, promotes the standby, waits for a write
// to succeed through the balancer, then rebuilds the old primary as the
// new standby and makes it synchronous. Until then the new primary commits
// without waiting for a standby (there is none to wait for): see
// docs/reliability.md.
func failoverOnce(t *testing.T, c *cluster, d *driver, v *violations, pair *pgPair, key, syncCommit string) failoverRound {
	t.Helper()
	old, next := pair.primary, pair.standby
	r := failoverRound{from: old.Name, to: next.Name}
	d.mu.Lock()
	before503 := d.statuses[http.StatusServiceUnavailable]
	d.mu.Unlock()

	r.killedAt = time.Now()
	old.Kill()
	r.killed = time.Since(r.killedAt)
	probe := make(chan probeResult, 1)
	go func() { probe <- d.probeWrite(r.killedAt, key, 2*time.Minute) }()
	next.Promote()
	r.promoted = time.Since(r.killedAt)
	p := <-probe
	r.firstWrite, r.probe503 = p.after, p.unavailable
	d.mu.Lock()
	r.driver503 = d.statuses[http.StatusServiceUnavailable] - before503
	d.mu.Unlock()
	if !p.ok {
		v.add("%s -> %s: no write succeeded within 2 minutes of the kill", r.from, r.to)
	}
	for _, s := range p.bad {
		v.add("%s -> %s: during the failover the probe got %s", r.from, r.to, s)
	}

	start := time.Now()
	r.rebuild = old.RebuildAsStandby(next)
	r.rebuilt = time.Since(start)
	next.SetSynchronous(syncCommit, old.Name)
	next.WaitStreaming(old.Name, true)
	r.resynce = time.Since(start)
	pair.primary, pair.standby = next, old
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
// in the new primary, and each acknowledged request, sent again with its
// key, answers the same status and body (the key's record survived; a
// lost one would make a second effect). It returns the new index.
func checkAcks(d *driver, v *violations, o *oracle, from int, killedAt time.Time, r *failoverRound) int {
	d.mu.Lock()
	acks := slices.Clone(d.acks[from:])
	var ids []string
	for _, x := range d.deposits {
		ids = append(ids, x.id)
	}
	for _, w := range d.wds {
		ids = append(ids, w.id)
	}
	d.mu.Unlock()
	for _, a := range acks {
		if a.at.Before(killedAt) {
			r.ackedBefore++
		}
	}

	ctx := context.Background()
	var found int
	var err error
	for i := 0; i < 30; i++ {
		err = o.c.db.Bun.NewRaw(`SELECT (SELECT count(*) FROM deposits WHERE id = ANY(?::uuid[])) + (SELECT count(*) FROM withdrawals WHERE id = ANY(?::uuid[]))`,
			pgdialect.Array(ids), pgdialect.Array(ids)).Scan(ctx, &found)
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	switch {
	case err != nil:
		v.add("%s -> %s: the acknowledged writes could not be read: %s", r.from, r.to, excerpt([]byte(err.Error())))
	case found != len(ids):
		v.add("%s -> %s: %d deposits and withdrawals were acknowledged, the new primary holds %d of them", r.from, r.to, len(ids), found)
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

// failoverFigures is the p50, p99 and max of the rounds' times to the
// first 2xx, and the 503s answered meanwhile.
func failoverFigures(rounds []failoverRound) string {
	if len(rounds) == 0 {
		return "no failover"
	}
	var first, prom []time.Duration
	var p503, d503 int
	for _, r := range rounds {
		first = append(first, r.firstWrite)
		prom = append(prom, r.promoted)
		p503 += r.probe503
		d503 += r.driver503
	}
	slices.Sort(first)
	slices.Sort(prom)
	q := func(l []time.Duration, p float64) time.Duration {
		i := int(float64(len(l))*p+0.999999) - 1
		return l[max(0, min(i, len(l)-1))].Round(time.Millisecond)
	}
	return fmt.Sprintf("kill to first write 2xx: p50 %s, p99 %s, max %s over %d failovers (kill to promoted: p50 %s, max %s); 503 answers during failovers: probe %d, load %d",
		q(first, 0.5), q(first, 0.99), first[len(first)-1].Round(time.Millisecond), len(rounds), q(prom, 0.5), prom[len(prom)-1].Round(time.Millisecond), p503, d503)
}
