package dbtest

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerMeter reads the CPU a PostgreSQL server on this machine spends on
// one database over a timed part: the whole server (its postmaster and
// every child, those that exited during the part counting through the
// postmaster's cumulative times), less the backends connected to other
// databases and the meter's own. The WAL writer, the checkpointer, the
// background writer and the autovacuum launcher serve every database;
// they count, as they would on a server the database had to itself. The
// other databases' backends are found by sampling pg_stat_activity (at
// Start, every sampleEvery and at Stop): one that started and ended
// between two samples is missed and counts as the database's, so on a
// server others use the figure is an upper bound, and Others says how much
// was taken out.
type ServerMeter struct {
	tb         testing.TB
	conn       *pgx.Conn
	postmaster int
	skip       []int

	mu      sync.Mutex
	total0  int64
	base    map[int]int64 // other backends' CPU ticks when first seen
	last    map[int]int64 // and when last seen
	seen    map[int]bool
	started bool
	stop    chan struct{}
	done    chan struct{}
}

// ServerUse is what a ServerMeter measured over one timed part.
type ServerUse struct {
	// Total is the whole server's CPU.
	Total time.Duration
	// Others is the CPU of the backends of other databases (and of the
	// meter's own, and of the processes skipped) seen during the part.
	Others time.Duration
	// OtherBackends is how many backends of other databases were seen.
	OtherBackends int
}

// Database is the server's CPU for the meter's database: Total less
// Others.
func (u ServerUse) Database() time.Duration { return u.Total - u.Others }

// sampleEvery is how often a ServerMeter lists the server's backends.
const sampleEvery = 250 * time.Millisecond

// NewServerMeter returns a meter of the server behind u for the database
// of u, which takes out, besides other databases' backends, the server
// processes skip (the benchmark's own connections to that database). It
// returns nil when the server's processes cannot be read (a server on
// another host): callers then report no server CPU.
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
	m.base, m.last, m.seen = map[int]int64{}, map[int]int64{}, map[int]bool{}
	m.started = false
	m.mu.Unlock()
	m.sample() // the backends there at the start count from now
	m.mu.Lock()
	m.started = true
	m.total0 = m.treeTicks()
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
	total := m.treeTicks() - m.total0
	var others int64
	for pid, v := range m.last {
		others += v - m.base[pid]
	}
	return ServerUse{Total: time.Duration(total) * clockTick, Others: time.Duration(others) * clockTick, OtherBackends: len(m.seen)}
}

// sample lists the processes of other databases and the skipped ones, and
// reads their CPU.
func (m *ServerMeter) sample() {
	rows, err := m.conn.Query(context.Background(), `SELECT pid FROM pg_stat_activity
 WHERE (datname IS NOT NULL AND datname <> current_database()) OR pid = ANY($1)`, m.skip)
	if err != nil {
		m.tb.Errorf("dbtest: server meter: %v", err)
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		m.tb.Errorf("dbtest: server meter: %v", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pid := range pids {
		f, ok := procStat(pid)
		if !ok {
			continue
		}
		v := sumFields(f, 11, 12)
		if _, known := m.base[pid]; !known {
			// There at the start: from now. Started since: all of it.
			if m.started {
				m.base[pid] = 0
			} else {
				m.base[pid] = v
			}
		}
		m.last[pid] = v
		if !slices.Contains(m.skip, pid) {
			m.seen[pid] = true
		}
	}
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
