//go:build !linux

package background

import "time"

func lowerPriority(int) error { return nil }

func priority() (int, error) { return 0, nil }

func threadCPU() time.Duration { return 0 }
