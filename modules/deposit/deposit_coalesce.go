package deposit

import (
	"sync"

	"github.com/google/uuid"
)

// coalescer runs one reconciliation of a deposit at a time in this process
// and folds the requests that arrive meanwhile into one more run.
//
// A paid invoice sends several webhooks at once (payment received, payment
// settled, processing, settled), each a job of its own, and each job used
// to reconcile the whole deposit: two processor reads and a transaction,
// four times over for the same state. A reconciliation reads the
// processor's state when it runs, so a webhook that arrives while one is
// running is covered by running it once more after it, and a third or
// fourth arriving meanwhile by that same rerun. A folded request waits for
// the run that covers it and returns that run's error, so that its
// webhook is marked processed only once that run has committed, and
// retried when it failed (or when the run before it failed, which ends
// the folding); the request that ran first returns its own run's error.
type coalescer struct {
	mu      sync.Mutex
	running map[uuid.UUID]*flight
}

// flight is a deposit's runs in progress; next is the run the folded
// requests wait for, nil while none has asked.
type flight struct{ next *rerun }

// rerun is one more run that folded requests wait for: done is closed
// when it has ended, with err.
type rerun struct {
	done    chan struct{}
	err     error
	waiters int
}

// do runs fn for id unless a run for id is in progress, in which case it
// asks that run to go once more, waits for it, and reports folded.
func (c *coalescer) do(id uuid.UUID, fn func() error) (folded bool, err error) {
	c.mu.Lock()
	if f, ok := c.running[id]; ok {
		if f.next == nil {
			f.next = &rerun{done: make(chan struct{})}
		}
		r := f.next
		r.waiters++
		c.mu.Unlock()
		<-r.done
		return true, r.err
	}
	if c.running == nil {
		c.running = make(map[uuid.UUID]*flight)
	}
	f := &flight{}
	c.running[id] = f
	c.mu.Unlock()
	var (
		serving *rerun // the rerun this run is, nil for the first
		first   error
	)
	for {
		err := fn()
		c.mu.Lock()
		if serving == nil {
			first = err
		} else {
			serving.err = err
			close(serving.done)
		}
		if err != nil || f.next == nil {
			if f.next != nil { // asked for after a failed run: not run, failed with it
				f.next.err = err
				close(f.next.done)
			}
			delete(c.running, id)
			c.mu.Unlock()
			return false, first
		}
		serving, f.next = f.next, nil
		c.mu.Unlock()
	}
}
