package background

import "syscall"

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
