package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"svc/platform/btcpay/btcpaysim"
)

// faults is the fault schedule: drawn from its own stream of the run's
// seed, one fault at a time, each followed by a pause.
type faults struct {
	c     *cluster
	v     *violations
	r     *rand.Rand
	pause time.Duration // mean time between faults

	mu                                        sync.Mutex
	kills, restarts, processor, receiverDowns int
	log                                       []string
}

func newFaults(c *cluster, v *violations, seed uint64, pause time.Duration) *faults {
	return &faults{c: c, v: v, r: rand.New(rand.NewPCG(seed, 0)), pause: pause}
}

func (f *faults) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

func (f *faults) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// run injects faults until ctx ends, then leaves everything up.
func (f *faults) run(ctx context.Context) {
	defer f.heal()
	var lastRestart, lastReceiver time.Time // the first may come at once
	start := time.Now()
	for ctx.Err() == nil {
		f.sleep(ctx, f.pause/2+time.Duration(f.r.Int64N(int64(f.pause))))
		if ctx.Err() != nil {
			return
		}
		n := f.r.IntN(100)
		if lastRestart.IsZero() && time.Since(start) > 5*f.pause {
			n = 55 // every run restarts the database at least once
		}
		switch {
		case n < 50:
			f.kill(ctx)
		case n < 60 && time.Since(lastRestart) > 4*f.pause:
			lastRestart = time.Now()
			f.restartDatabase()
		case n < 88:
			f.processorFault(ctx)
		case n < 94 && time.Since(lastReceiver) > receiverSpacing:
			lastReceiver = time.Now()
			f.receiverDown(ctx)
		case n < 94:
			f.processorFault(ctx)
		default:
			f.killTwo(ctx)
		}
	}
}

// kill sends SIGKILL to a random api or worker and starts it again after
// a moment (another may be killed meanwhile: both api processes can be
// down at once).
func (f *faults) kill(ctx context.Context) {
	procs := f.c.procs()
	p := procs[f.r.IntN(len(procs))]
	wait := time.Duration(200+f.r.IntN(3000)) * time.Millisecond
	if !p.Alive() {
		return
	}
	p.Kill()
	f.mu.Lock()
	f.kills++
	f.mu.Unlock()
	f.note("kill -9 %s, back in %s", p.Name, wait)
	f.sleep(ctx, wait)
	f.restart(p)
}

// killTwo kills two different processes at once (both api or both worker
// processes can be down together) and starts them again after a moment.
func (f *faults) killTwo(ctx context.Context) {
	procs := f.c.procs()
	i := f.r.IntN(len(procs))
	j := (i + 1 + f.r.IntN(len(procs)-1)) % len(procs)
	wait := time.Duration(200+f.r.IntN(3000)) * time.Millisecond
	for _, p := range []*proc{procs[i], procs[j]} {
		if p.Alive() {
			p.Kill()
			f.mu.Lock()
			f.kills++
			f.mu.Unlock()
		}
	}
	f.note("kill -9 %s and %s together, back in %s", procs[i].Name, procs[j].Name, wait)
	f.sleep(ctx, wait)
	f.restart(procs[i])
	f.restart(procs[j])
}

func (f *faults) restart(p *proc) {
	if p.Alive() {
		return
	}
	if err := p.Start(); err != nil {
		f.v.add("restart %s: %v", p.Name, err)
		return
	}
	if err := p.WaitReady(60 * time.Second); err != nil {
		f.v.add("%s did not come back after a kill: %v (log %s)", p.Name, err, p.Log)
	}
}

// restartDatabase restarts PostgreSQL at once (pg_ctl -m immediate): every
// connection of every process breaks mid-statement.
func (f *faults) restartDatabase() {
	f.mu.Lock()
	f.restarts++
	f.mu.Unlock()
	f.note("pg_ctl restart -m immediate")
	f.c.pg.Restart()
}

// processorFault makes the processor fail for a few seconds: 503 pages,
// connections dropped, no answer, slow answers, or requests that take
// effect while their answer is lost.
func (f *faults) processorFault(ctx context.Context) {
	f.mu.Lock()
	f.processor++
	f.mu.Unlock()
	d := time.Duration(1000+f.r.IntN(6000)) * time.Millisecond
	switch n := f.r.IntN(6); n {
	case 0, 1, 2:
		mode := []btcpaysim.DownMode{btcpaysim.DownError, btcpaysim.DownDrop, btcpaysim.DownHang}[n]
		f.note("processor down (%s) for %s", mode, d)
		f.c.sim.GoDown(mode)
	case 3:
		count := 1 + f.r.IntN(4)
		f.note("processor loses the answers of its next %d requests (drop-after)", count)
		f.c.sim.FailNext(count, btcpaysim.DownDropAfter)
	case 4:
		delay := time.Duration(300+f.r.IntN(3500)) * time.Millisecond
		f.note("processor slow (%s per request) for %s", delay, d)
		f.c.sim.GoSlow(delay)
	default:
		count := 2 + f.r.IntN(5)
		f.note("processor answers 503 to its next %d requests", count)
		f.c.sim.FailNext(count, btcpaysim.DownError)
	}
	f.sleep(ctx, d)
	f.c.sim.Up()
}

// receiverSpacing keeps receiver outages apart by more than the first
// retry delay of an event (1 minute), so an event fails at most once and a
// run settles within minutes: the SPEC's later delays (5 minutes, 30
// minutes, ...) are what they are, and a run that waited for them would
// prove nothing more.
const receiverSpacing = 2 * time.Minute

// receiverDown takes the platform's webhook receiver down for a while.
func (f *faults) receiverDown(ctx context.Context) {
	f.mu.Lock()
	f.receiverDowns++
	f.mu.Unlock()
	d := time.Duration(2000+f.r.IntN(8000)) * time.Millisecond
	f.note("receiver down for %s", d)
	f.c.recv.down.Store(true)
	f.sleep(ctx, d)
	f.c.recv.down.Store(false)
}

// heal brings everything back: every process running, the processor and
// the receiver up.
func (f *faults) heal() {
	f.c.sim.Up()
	f.c.recv.down.Store(false)
	for _, p := range f.c.procs() {
		f.restart(p)
	}
}

func (f *faults) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("kills %d, database restarts %d, processor faults %d, receiver outages %d",
		f.kills, f.restarts, f.processor, f.receiverDowns)
}
