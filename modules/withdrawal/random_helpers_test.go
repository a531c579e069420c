package withdrawal_test

import (
	"math/rand/v2"
	"testing"

	"svc/platform/randtest"
)

// seededRand is the random source of a randomized test, drawn from the
// seed its flags give (randtest.Flags.Seed, which logs how to replay the
// run); stream tells the test's source from another test's with the same
// seed.
func seededRand(t *testing.T, f randtest.Flags, stream uint64) *rand.Rand {
	t.Helper()
	seed := f.Seed(t, "modules/withdrawal")
	return rand.New(rand.NewPCG(seed, seed^stream))
}
