// Package background runs the CPU-heavy part of a periodic job (the
// ledger's checkpoints, the proof of liabilities) so that it yields the
// CPU to the service's writers: on an OS thread of its own whose
// scheduling priority is the lowest (nice 19, per thread on Linux), and
// with one goroutine, so that the job uses at most one core and only the
// time that nothing else wants.
//
// Go schedules goroutines on threads it shares between them, so a
// priority can only be given to a goroutine locked to its thread
// (runtime.LockOSThread). The thread is never unlocked: when the job's
// goroutine ends, Go ends the thread with it, and the priority cannot
// leak to another goroutine. On systems other than Linux the job runs at
// normal priority.
package background

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Nice is the lowest priority, the one the service's jobs run at.
const Nice = 19

// spent is the CPU time of Run's threads, in nanoseconds (CPU).
var spent atomic.Int64

// CPU returns the CPU time (user and system) that the threads of Run have
// spent running their fn so far, in this process: the kernel's accounting
// of each thread, read when fn starts and when it ends, so it counts the
// job's own work whatever else the machine runs, and nothing of the
// process's other goroutines: neither those fn starts (pgx encodes a
// COPY's rows in one) nor the garbage collector's workers.
// fn run at nice 0, in the caller's goroutine, is not counted; nor is
// anything where per-thread accounting is not available (systems other
// than Linux). A benchmark reads it before and after a job.
func CPU() time.Duration { return time.Duration(spent.Load()) }

// Run runs fn on a thread of its own at priority nice (0 to 19; 0 runs fn
// in the caller's goroutine, as if called directly) and returns what fn
// returns. A panic in fn is raised again in the caller.
func Run(nice int, fn func() error) error {
	if nice <= 0 {
		return fn()
	}
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panic = p
			}
			done <- r
		}()
		_ = lowerPriority(min(nice, Nice)) // should it fail, the job runs at normal priority
		start := threadCPU()
		defer func() { spent.Add(int64(threadCPU() - start)) }()
		r.err = fn()
	}()
	r := <-done
	if r.panic != nil {
		panic(fmt.Sprint("background: ", r.panic))
	}
	return r.err
}

// Priority returns the calling thread's nice value (for tests).
func Priority() (int, error) { return priority() }
