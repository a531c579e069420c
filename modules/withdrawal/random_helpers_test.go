package withdrawal_test

import (
	"math/rand/v2"
	"testing"
	"time"
)

// seededRand is the random source of a randomized test: from seed, or
// from the clock when seed is 0. It logs the command that replays the run;
// prefix names the test's -PREFIX.seed and -PREFIX.ops flags, and stream
// tells the test's source from another test's with the same seed.
func seededRand(t *testing.T, seed uint64, prefix string, ops int, stream uint64) *rand.Rand {
	t.Helper()
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d: replay with go test ./modules/withdrawal -run %s -%s.seed=%d -%s.ops=%d", seed, t.Name(), prefix, seed, prefix, ops)
	return rand.New(rand.NewPCG(seed, seed^stream))
}
