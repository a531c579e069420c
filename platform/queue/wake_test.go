package queue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"svc/platform/queue"
)

type wakeArgs struct {
	IDs []int `json:"ids"`
}

func (wakeArgs) Kind() string { return "wake_test" }

// slowInserter takes 20 ms an insert and records the jobs and how many
// inserts were ever in flight at once.
type slowInserter struct {
	inFlight, most atomic.Int32
	mu             sync.Mutex
	jobs           [][]int
}

func (s *slowInserter) Insert(_ context.Context, args river.JobArgs, _ *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	n := s.inFlight.Add(1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	s.inFlight.Add(-1)
	s.mu.Lock()
	s.jobs = append(s.jobs, args.(wakeArgs).IDs)
	s.mu.Unlock()
	return &rivertype.JobInsertResult{}, nil
}

// TestAWakerKeepsOneInsertInFlight: however fast ids come and however slow
// the database is, one insert at a time, each at most Max ids, and every
// id once; Close wakes the rest.
func TestAWakerKeepsOneInsertInFlight(t *testing.T) {
	t.Parallel()
	ins := &slowInserter{}
	w := &queue.Waker[int]{Inserter: ins, Max: 5, Delay: time.Millisecond,
		Job: func(ids []int) river.JobArgs { return wakeArgs{IDs: ids} }}
	var (
		wg   sync.WaitGroup
		next atomic.Int32
	)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				w.Add(int(next.Add(1)))
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	w.Close()
	require.EqualValues(t, 1, ins.most.Load(), "one insert in flight at a time")
	seen := map[int]bool{}
	for _, j := range ins.jobs {
		require.LessOrEqual(t, len(j), 5)
		for _, id := range j {
			require.False(t, seen[id], "id %d woken twice", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, 400, "every id woken")
}
