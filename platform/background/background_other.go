//go:build !linux

package background

func lowerPriority(int) error { return nil }

func priority() (int, error) { return 0, nil }
