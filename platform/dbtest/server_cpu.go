package dbtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerMeter reads the CPU a PostgreSQL server on this machine spends on
// one database over a timed part, two ways.
//
// Own, the figure to use: the processes of the database (its backends,
// its autovacuum workers) and those that serve every database (WAL
// writer, checkpointer, background writer, launchers, the postmaster
// itself), found by sampling
// pg_stat_activity at Start, every sampleEvery and at Stop, and their CPU
// read from /proc. A process that started during the part counts whole; one
// that ended counts up to its last sample. Other databases' backends are
// not in it, so it holds on a server others use, but for what the shared
// processes do for them.
//
// Total less Others, the cross-check: the whole server (its postmaster and
// every child, those that ended during the part counting through the
// postmaster's cumulative times), less the backends of other databases
// seen by the same samples. On a server the database has to itself it is
// exact, and Own should be within a few percent of it; on one others use,
// their backends that started and ended between two samples are not seen
// and count in it.
type ServerMeter struct {
	tb         testing.TB
	conn       *pgx.Conn
	postmaster int
	skip       []int

	mu      sync.Mutex
	total0  int64
	pm0     int64 // the postmaster's own CPU ticks at the start
	procs   map[int]*sampled
	started bool
	stop    chan struct{}
	done    chan struct{}
}

// sampled is one server process seen by a ServerMeter: its CPU ticks when
// first seen (0 when it started during the part) and when last seen.
type sampled struct {
	ours        bool
	first, last int64
}

// ServerUse is what a ServerMeter measured over one timed part.
type ServerUse struct {
	// Own is the CPU of the database's processes and of the server's
	// shared ones.
	Own time.Duration
	// Total is the whole server's CPU.
	Total time.Duration
	// Others is the CPU of the backends of other databases (and of the
	// meter's own, and of the processes skipped) seen during the part.
	Others time.Duration
	// OtherBackends is how many backends of other databases were seen.
	OtherBackends int
}

// Rest is the whole server less the other databases' backends seen: the
// cross-check of Own.
func (u ServerUse) Rest() time.Duration { return u.Total - u.Others }

// CrossCheck says, per operation of ops, the whole server less the other
// databases' backends beside Own, and how much those backends took.
func (u ServerUse) CrossCheck(ops float64) string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / ops }
	return fmt.Sprintf("the whole server less other databases' backends %.3f ms (%d of those seen, %.2f s)",
		ms(u.Rest()), u.OtherBackends, u.Others.Seconds())
}

// sampleEvery is how often a ServerMeter lists the server's processes.
const sampleEvery = 100 * time.Millisecond

// NewServerMeter returns a meter of the server behind u for the database
// of u, which leaves out, besides other databases' backends, the server
// processes skip (the benchmark's own connections to that database) and
// its own connection's. It returns nil when the server's processes cannot
// be read (a server on another host): callers then report no server CPU.
func NewServerMeter(tb testing.TB, u string, skip ...int) *ServerMeter {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		tb.Fatalf("dbtest: server meter: %v", err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	self := BackendPID(tb, conn)
	f, ok := procStat(self)
	if !ok || len(f) < 2 {
		return nil
	}
	postmaster, _ := strconv.Atoi(f[1])
	if _, ok := procStat(postmaster); !ok {
		return nil
	}
	return &ServerMeter{tb: tb, conn: conn, postmaster: postmaster, skip: append([]int{self}, skip...)}
}

// Start begins a timed part.
func (m *ServerMeter) Start() {
	m.mu.Lock()
	m.procs, m.started = map[int]*sampled{}, false
	m.mu.Unlock()
	m.sample() // the processes there at the start count from now
	m.mu.Lock()
	m.started = true
	m.total0, m.pm0 = m.treeTicks(), m.postmasterTicks()
	m.mu.Unlock()
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
}

// Stop ends the timed part and returns what it cost.
func (m *ServerMeter) Stop() ServerUse {
	close(m.stop)
	<-m.done
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	u := ServerUse{Total: time.Duration(m.treeTicks()-m.total0) * clockTick,
		Own: time.Duration(m.postmasterTicks()-m.pm0) * clockTick}
	for pid, p := range m.procs {
		d := time.Duration(p.last-p.first) * clockTick
		switch {
		case p.ours:
			u.Own += d
		default:
			u.Others += d
			if !slices.Contains(m.skip, pid) {
				u.OtherBackends++
			}
		}
	}
	return u
}

// sample lists the server's processes, which it sorts into the database's
// (and the shared ones) and the others, and reads their CPU.
func (m *ServerMeter) sample() {
	rows, err := m.conn.Query(context.Background(), `SELECT pid, (datname IS NULL OR datname = current_database()) AND pid <> ALL($1)
 FROM pg_stat_activity`, m.skip)
	if err != nil {
		m.tb.Errorf("dbtest: server meter: %v", err)
		return
	}
	type row struct {
		Pid  int
		Ours bool
	}
	seen, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		m.tb.Errorf("dbtest: server meter: %v", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range seen {
		f, ok := procStat(r.Pid)
		if !ok {
			continue
		}
		v := sumFields(f, 11, 12)
		p := m.procs[r.Pid]
		if p == nil {
			// There at the start: from now. Started since: all of it.
			p = &sampled{ours: r.Ours}
			if !m.started {
				p.first = v
			}
			m.procs[r.Pid] = p
		}
		p.last = v
	}
}

// postmasterTicks is the postmaster's own CPU (it starts every
// connection's process), in clock ticks.
func (m *ServerMeter) postmasterTicks() int64 {
	f, _ := procStat(m.postmaster)
	return sumFields(f, 11, 12)
}

// treeTicks is the CPU of the postmaster, of its live children and of
// those it has reaped, in clock ticks.
func (m *ServerMeter) treeTicks() int64 {
	var ticks int64
	if f, ok := procStat(m.postmaster); ok {
		ticks += sumFields(f, 11, 12, 13, 14) // utime, stime, cutime, cstime
	}
	parent := strconv.Itoa(m.postmaster)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if f, ok := procStat(pid); ok && len(f) > 12 && f[1] == parent {
			ticks += sumFields(f, 11, 12)
		}
	}
	return ticks
}
