package background_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/background"
)

func TestRunLowersOnlyItsOwnThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("per-thread priorities are Linux's")
	}
	var inside int
	err := background.Run(background.Nice, func() error {
		var err error
		inside, err = background.Priority()
		return err
	})
	require.NoError(t, err)
	require.Equal(t, background.Nice, inside)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	here, err := background.Priority()
	require.NoError(t, err)
	require.NotEqual(t, background.Nice, here, "the caller's thread keeps its priority")
}

func TestRunReturnsErrorsAndPanics(t *testing.T) {
	boom := errors.New("boom")
	require.ErrorIs(t, background.Run(background.Nice, func() error { return boom }), boom)
	require.PanicsWithValue(t, "background: oops", func() { _ = background.Run(background.Nice, func() error { panic("oops") }) })
}

func TestCPUCountsTheJobsThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("per-thread accounting is Linux's")
	}
	before := background.CPU()
	require.NoError(t, background.Run(background.Nice, func() error {
		for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		}
		return nil
	}))
	// The loop spins for 50 ms of wall-clock time; on a busy machine at
	// nice 19 it may get little of it, but never none.
	spent := background.CPU() - before
	require.Greater(t, spent, time.Duration(0))
	require.Less(t, spent, time.Second)
}
