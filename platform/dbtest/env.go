package dbtest

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// IntEnv returns the whole number in the environment variable name (a
// benchmark's size or rounds, say), or def when it is unset or empty; a
// value that is not a number fails the benchmark.
func IntEnv(tb testing.TB, name string, def int) int {
	tb.Helper()
	return fromEnv(tb, name, def, strconv.Atoi)
}

// DurationEnv returns the duration in the environment variable name (as
// time.ParseDuration reads it: "10s", "2m"), or def when it is unset or
// empty; a value that is not a duration fails the benchmark.
func DurationEnv(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	return fromEnv(tb, name, def, time.ParseDuration)
}

func fromEnv[T any](tb testing.TB, name string, def T, parse func(string) (T, error)) T {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := parse(s)
	require.NoError(tb, err, name)
	return v
}
