package background

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lowerPriority sets the calling thread's nice value: on Linux,
// setpriority(PRIO_PROCESS, tid) applies to that thread alone. Raising it
// needs no privilege.
func lowerPriority(nice int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), nice)
}

func priority() (int, error) {
	// The raw system call returns 20 - nice, to keep it positive.
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	if err != nil {
		return 0, err
	}
	return 20 - p, nil
}

// threadCPU returns the calling thread's CPU time so far (getrusage
// RUSAGE_THREAD), 0 should it fail.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
