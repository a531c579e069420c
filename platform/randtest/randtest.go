// Package randtest gives a randomized test its size and its seed from the
// command line, and logs the command that replays a run, so that a
// failure found with a random seed can be run again.
package randtest

import (
	"flag"
	"testing"
	"time"
)

// Flags are a randomized test's -PREFIX.ops (how many steps it takes) and
// -PREFIX.seed (the seed it draws from; 0 picks one).
type Flags struct {
	prefix string
	ops    *int
	seed   *uint64
}

// NewFlags defines the flags -PREFIX.ops, ops by default and described by
// usage, and -PREFIX.seed, the seed of the test named test. Call it in a
// package-level var, as flag.Int would be.
func NewFlags(prefix string, ops int, usage, test string) Flags {
	return Flags{
		prefix: prefix,
		ops:    flag.Int(prefix+".ops", ops, usage),
		seed:   flag.Uint64(prefix+".seed", 0, "seed of "+test+"; 0 picks one (the test prints it so a failure replays)"),
	}
}

// Ops is the number of steps, -PREFIX.ops.
func (f Flags) Ops() int { return *f.ops }

// Seed returns -PREFIX.seed, or a seed from the clock when it is 0, and
// logs the command that replays the run: go test ./dir -run TEST with
// the seed and the number of steps.
func (f Flags) Seed(t testing.TB, dir string) uint64 {
	t.Helper()
	seed := *f.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d: replay with go test ./%s -run %s -%s.seed=%d -%s.ops=%d", seed, dir, t.Name(), f.prefix, seed, f.prefix, f.Ops())
	return seed
}
