package dbtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"svc/platform/background"
	"svc/platform/db"
)

// JobCost is the CPU one run of a periodic job took (a checkpoint, a
// snapshot), read from the kernel's accounting, so that it holds whatever
// else the machine runs: CPU time is what the job took from others, not
// how long it waited for a core.
type JobCost struct {
	// Units is what the run did: the entries it sealed, the users it
	// summed.
	Units float64
	// Thread is the CPU of the job's low-priority thread (background.CPU):
	// its reading, encoding and hashing.
	Thread time.Duration
	// Process is the CPU of this whole process over the run: the thread,
	// and what the job made other goroutines do (the garbage collector's
	// workers, the driver's). It is the job's only when nothing else of
	// the process ran meanwhile (the writers stopped).
	Process time.Duration
	// Server is the CPU of the server process behind the job's connection
	// (its reads, its writes, their WAL records); 0 with ServerOK false
	// when that process cannot be read.
	Server   time.Duration
	ServerOK bool
	// Took is the run's wall-clock time.
	Took time.Duration
}

// JobConn opens a pool of one connection to u for a measured job, closed
// with tb, and returns it with the process id of its server process (for
// MeasureJob); it says so when that process cannot be read (/proc), in
// which case the server's CPU is not measured.
func JobConn(tb testing.TB, u string) (*db.DB, int) {
	tb.Helper()
	job, err := db.Open(context.Background(), u, 1)
	if err != nil {
		tb.Fatalf("dbtest: job connection: %v", err)
	}
	tb.Cleanup(job.Close)
	pid := BackendPID(tb, job.Pool)
	if _, ok := ProcessCPU(pid); !ok {
		fmt.Printf("the server's process %d cannot be read (/proc): the server's CPU is not measured\n", pid)
	}
	return job, pid
}

// MeasureJob runs job, which runs on the connection whose server process
// is pid and returns its units, and returns what it cost.
func MeasureJob(pid int, job func() float64) JobCost {
	thread, self := background.CPU(), SelfCPU()
	server, ok := ProcessCPU(pid)
	start := time.Now()
	units := job()
	c := JobCost{Units: units, Thread: background.CPU() - thread, Process: SelfCPU() - self, Took: time.Since(start)}
	if after, ok2 := ProcessCPU(pid); ok && ok2 {
		c.Server, c.ServerOK = after-server, true
	}
	return c
}

// JobSummary returns, for the runs of a job that did something, the CPU
// seconds per per units (a million entries), median and range, of the
// thread, of the process when process (the runs had the process to
// themselves) and of the server process, one line each.
func JobSummary(costs []JobCost, per float64, unit string, process bool) string {
	var thread, proc, server, total []float64
	for _, c := range costs {
		if c.Units <= 0 {
			continue
		}
		scale := per / c.Units
		thread = append(thread, c.Thread.Seconds()*scale)
		proc = append(proc, c.Process.Seconds()*scale)
		if c.ServerOK {
			server = append(server, c.Server.Seconds()*scale)
			client := c.Thread
			if process {
				client = c.Process
			}
			total = append(total, (client+c.Server).Seconds()*scale)
		}
	}
	if len(thread) == 0 {
		return "  no run\n"
	}
	var out strings.Builder
	line := func(what string, v []float64) {
		med, lo, hi := Spread(v)
		fmt.Fprintf(&out, "  %-34s %.3f CPU-s per %.0f %s (median of %d; %.3f to %.3f)\n", what, med, per, unit, len(v), lo, hi)
	}
	line("the job's thread", thread)
	if process {
		line("the whole process", proc)
	}
	if len(server) > 0 {
		line("its server process", server)
		if process {
			line("process + server process", total)
		} else {
			line("thread + server process", total)
		}
	} else {
		out.WriteString("  its server process: not readable here (/proc), not measured\n")
	}
	return out.String()
}

// JobPerUnit returns the median CPU of a job per unit: its process's (or
// thread's, without process) and its server process's, in seconds.
func JobPerUnit(costs []JobCost, process bool) float64 {
	var v []float64
	for _, c := range costs {
		if c.Units > 0 {
			client := c.Thread
			if process {
				client = c.Process
			}
			v = append(v, (client+c.Server).Seconds()/c.Units)
		}
	}
	med, _, _ := Spread(v)
	return med
}

// LoadCost is the CPU a load took over one run: this process's (the
// clients, and the benchmark's own loop), the backends of its database,
// and the whole server's (every process of it: the backends, the WAL
// writer, the checkpointer, and any other client of the server).
type LoadCost struct {
	Ops                      float64
	Client, Backends, Server time.Duration
	BackendsOK               bool
}

// LoadMeter reads what a load costs (LoadCost).
type LoadMeter struct {
	backends func() (time.Duration, bool)
	all      func() (self, server time.Duration)
}

// NewLoadMeter measures loads on the database of d, without the server
// processes skip (a job's, measured apart).
func NewLoadMeter(tb testing.TB, d *db.DB, skip ...int) *LoadMeter {
	tb.Helper()
	return &LoadMeter{backends: BackendsCPU(tb, d, skip...), all: CPU(tb, d)}
}

// Start begins a run; the function it returns ends it, given the
// operations done.
func (m *LoadMeter) Start() func(ops float64) LoadCost {
	backends, ok := m.backends()
	self, server := m.all()
	return func(ops float64) LoadCost {
		self2, server2 := m.all()
		backends2, ok2 := m.backends()
		return LoadCost{Ops: ops, Client: self2 - self, Backends: backends2 - backends, Server: server2 - server, BackendsOK: ok && ok2}
	}
}

// PerOp returns the client's and the backends' CPU per operation, in
// seconds.
func (c LoadCost) PerOp() float64 {
	if c.Ops == 0 {
		return 0
	}
	return (c.Client + c.Backends).Seconds() / c.Ops
}

func (c LoadCost) String() string {
	if c.Ops == 0 {
		return "no operation"
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / c.Ops }
	if !c.BackendsOK {
		return fmt.Sprintf("CPU per operation: client %.0f µs; the server's processes not readable here", us(c.Client))
	}
	return fmt.Sprintf("CPU per operation: client %.0f µs, its backends %.0f µs (the whole server %.0f µs)", us(c.Client), us(c.Backends), us(c.Server))
}
