package deposit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// Webhooks that arrive while a deposit's reconciliation runs cost one more
// run, however many they are; other deposits are not held up; a failed run
// is not rerun (its job is retried) and the next request runs afresh.
func TestCoalescerFoldsConcurrentRequests(t *testing.T) {
	t.Parallel()
	var c coalescer
	id, other := uuid.New(), uuid.New()
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		folded, err := c.do(id, func() error {
			if runs.Add(1) == 1 {
				close(started)
				<-release
			}
			return nil
		})
		require.False(t, folded)
		first <- err
	}()
	<-started

	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			folded, err := c.do(id, func() error { t.Error("a folded request ran"); return nil })
			require.True(t, folded)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	otherRan := false
	folded, err := c.do(other, func() error { otherRan = true; return nil })
	require.NoError(t, err)
	require.False(t, folded)
	require.True(t, otherRan, "another deposit is not held up")

	close(release)
	require.NoError(t, <-first)
	require.Equal(t, int32(2), runs.Load(), "three folded requests cost one more run")

	// A failed run returns its error and is not rerun; the next request runs.
	boom := errors.New("processor unreachable")
	started2, release2 := make(chan struct{}), make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		_, err := c.do(id, func() error { close(started2); <-release2; return boom })
		failed <- err
	}()
	<-started2
	folded, err = c.do(id, func() error { return nil })
	require.True(t, folded)
	require.NoError(t, err)
	close(release2)
	require.ErrorIs(t, <-failed, boom)
	ran := false
	folded, err = c.do(id, func() error { ran = true; return nil })
	require.NoError(t, err)
	require.False(t, folded)
	require.True(t, ran)
}
