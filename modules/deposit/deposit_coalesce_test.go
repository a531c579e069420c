package deposit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// waitFolded waits until n requests for id wait for its next run.
func waitFolded(t *testing.T, c *coalescer, id uuid.UUID, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		f := c.running[id]
		return f != nil && f.next != nil && f.next.waiters == n
	}, 5*time.Second, time.Millisecond)
}

// Webhooks that arrive while a deposit's reconciliation runs cost one more
// run, however many they are, and wait for it; other deposits are not held
// up; a failed run is not rerun (its job is retried, and so are the
// requests folded into it) and the next request runs afresh.
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
	var returned atomic.Int32
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			folded, err := c.do(id, func() error { t.Error("a folded request ran"); return nil })
			returned.Add(1)
			require.True(t, folded)
			require.NoError(t, err)
		}()
	}
	waitFolded(t, &c, id, 3)
	otherRan := false
	folded, err := c.do(other, func() error { otherRan = true; return nil })
	require.NoError(t, err)
	require.False(t, folded)
	require.True(t, otherRan, "another deposit is not held up")
	require.Zero(t, returned.Load(), "a folded request waits for the run that covers it")

	close(release)
	wg.Wait()
	require.NoError(t, <-first)
	require.Equal(t, int32(2), runs.Load(), "three folded requests cost one more run")

	// A failed run returns its error and is not rerun: the request folded
	// into it fails with it; the next request runs.
	boom := errors.New("processor unreachable")
	started2, release2 := make(chan struct{}), make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		_, err := c.do(id, func() error { close(started2); <-release2; return boom })
		failed <- err
	}()
	<-started2
	foldedErr := make(chan error, 1)
	go func() {
		folded, err := c.do(id, func() error { t.Error("a folded request ran"); return nil })
		require.True(t, folded)
		foldedErr <- err
	}()
	waitFolded(t, &c, id, 1)
	close(release2)
	require.ErrorIs(t, <-failed, boom)
	require.ErrorIs(t, <-foldedErr, boom)
	ran := false
	folded, err = c.do(id, func() error { ran = true; return nil })
	require.NoError(t, err)
	require.False(t, folded)
	require.True(t, ran)

	// The rerun fails: the folded request has its error, the first request
	// its own run's success.
	started3, release3 := make(chan struct{}), make(chan struct{})
	var runs3 atomic.Int32
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.do(id, func() error {
			if runs3.Add(1) == 1 {
				close(started3)
				<-release3
				return nil
			}
			return boom
		})
		firstErr <- err
	}()
	<-started3
	go func() {
		_, err := c.do(id, func() error { return nil })
		foldedErr <- err
	}()
	waitFolded(t, &c, id, 1)
	close(release3)
	require.NoError(t, <-firstErr)
	require.ErrorIs(t, <-foldedErr, boom)
}
