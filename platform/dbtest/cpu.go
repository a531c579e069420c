package dbtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
