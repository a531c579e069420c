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
// fourth arriving meanwhile by that same rerun. The job of a folded webhook
// returns at once; if the run it was folded into fails, that run's job is
// retried (and the open-deposit poll reads every deposit anyway), so no
// webhook's effect depends on its own job alone.
type coalescer struct {
	mu      sync.Mutex
	running map[uuid.UUID]*flight
}

type flight struct{ again bool }

// do runs fn for id unless a run for id is in progress, in which case it
// asks that run to go once more and reports folded.
func (c *coalescer) do(id uuid.UUID, fn func() error) (folded bool, err error) {
	c.mu.Lock()
	if f, ok := c.running[id]; ok {
		f.again = true
		c.mu.Unlock()
		return true, nil
	}
	if c.running == nil {
		c.running = make(map[uuid.UUID]*flight)
	}
	f := &flight{}
	c.running[id] = f
	c.mu.Unlock()
	for {
		err = fn()
		c.mu.Lock()
		if err != nil || !f.again {
			delete(c.running, id)
			c.mu.Unlock()
			return false, err
		}
		f.again = false
		c.mu.Unlock()
	}
}
