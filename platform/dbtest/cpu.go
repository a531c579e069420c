package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"svc/platform/db"
)

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100
// on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// CPU reads the CPU time spent so far by this process and by the database
// server behind d (its postmaster and every child: backends, WAL writer,
// checkpointer; children that exited count through the postmaster's
// cumulative times). A benchmark reads it before and after its timed part
// and divides by its operations, which says where each operation's CPU
// goes whatever else the machine runs. The server's part counts every
// client of the server, so it means something only on a server the
// benchmark has to itself (make bench's private server when nothing else
// runs on it); it is 0 when the server's processes cannot be read (a
// server on another host).
func CPU(tb testing.TB, d *db.DB) func() (self, server time.Duration) {
	tb.Helper()
	var backend int
	if err := d.Pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		tb.Fatalf("dbtest: backend pid: %v", err)
	}
	postmaster := 0
	if f, ok := procStat(backend); ok && len(f) > 1 {
		postmaster, _ = strconv.Atoi(f[1])
	}
	return func() (time.Duration, time.Duration) {
		self := SelfCPU()
		if postmaster == 0 {
			return self, 0
		}
		var ticks int64
		if f, ok := procStat(postmaster); ok {
			ticks += sumFields(f, 11, 12, 13, 14) // utime, stime, cutime, cstime
		}
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, dir := range dirs {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			if f, ok := procStat(pid); ok && len(f) > 12 && f[1] == strconv.Itoa(postmaster) {
				ticks += sumFields(f, 11, 12)
			}
		}
		return self, time.Duration(ticks) * clockTick
	}
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state is [0], ppid [1], utime [11], stime [12], cutime [13], cstime [14].
func procStat(pid int) ([]string, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil, false
	}
	return strings.Fields(s[i+2:]), true
}

func sumFields(f []string, idx ...int) int64 {
	var n int64
	for _, i := range idx {
		if i < len(f) {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
	}
	return n
}

// SelfCPU returns the CPU time (user and system) this process has spent so
// far, on all its threads.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU returns the CPU time a process of this machine (a server
// process behind one connection: pg_backend_pid()) has spent so far: its
// time on a CPU in nanoseconds from /proc/PID/schedstat, or its user and
// system time in clock ticks from /proc/PID/stat where that is missing.
// ok is false when neither can be read: a server on another host, or
// processes this user may not see.
func ProcessCPU(pid int) (cpu time.Duration, ok bool) {
	if raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if f := strings.Fields(string(raw)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns), true
			}
		}
	}
	f, ok := procStat(pid)
	if !ok {
		return 0, false
	}
	return time.Duration(sumFields(f, 11, 12)) * clockTick, true
}

// BackendPID returns the process id of the server process behind the
// connection q runs on (one connection, or a pool of one).
func BackendPID(tb testing.TB, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) int {
	tb.Helper()
	var pid int
	if err := q.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		tb.Fatalf("dbtest: backend pid: %v", err)
	}
	return pid
}

// BackendsCPU returns a reader of the CPU time spent so far by the client
// backends connected to the database of d, except the processes skip (a
// job's, measured apart): the server's side of a load, without the rest
// of the server (WAL writer, checkpointer, other databases' clients).
// Each call lists them again (pg_stat_activity), so a backend opened in
// between counts from its start; one that ended in between takes its time
// with it. It returns 0 and false when their processes cannot be read.
func BackendsCPU(tb testing.TB, d *db.DB, skip ...int) func() (time.Duration, bool) {
	tb.Helper()
	return func() (time.Duration, bool) {
		rows, err := d.Pool.Query(context.Background(),
			`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
		if err != nil {
			tb.Errorf("dbtest: backends: %v", err)
			return 0, false
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			tb.Errorf("dbtest: backends: %v", err)
			return 0, false
		}
		var sum time.Duration
		for _, pid := range pids {
			if slices.Contains(skip, pid) {
				continue
			}
			c, ok := ProcessCPU(pid)
			if !ok {
				return 0, false
			}
			sum += c
		}
		return sum, true
	}
}
