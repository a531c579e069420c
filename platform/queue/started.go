package queue

import (
	"context"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// startedKeep is how long Started remembers a job after its work
// returned: River records the outcome asynchronously (its completer
// batches them), so a finished job can still read as running for a
// while; far beyond that delay.
const startedKeep = 10 * time.Minute

// Started remembers the jobs this worker process has begun to work, for
// DeadWorkerRescue to tell a job the process really has from one that the
// database marked running for it but that never reached it: River fetches
// jobs by marking them running in one statement, and when the database
// goes away after that commit and before its answer arrives (a failover
// to a synchronous standby, which has the commit; a crash), the jobs stay
// running under a worker that is alive, holds its liveness lock, and never
// heard of them. Without this, they would wait for River's time-based
// rescue (RescueAfter, minutes).
//
// A job is remembered for as long as its work runs, however long, and
// for startedKeep after.
type Started struct {
	mu      sync.Mutex
	keep    time.Duration
	running map[int64]int       // begun and not yet returned (a job's attempts share its id)
	done    map[int64]time.Time // returned, and when
}

// NewStarted returns an empty record; give it to WorkerParams.Started and
// DeadWorkerRescue.Started of the same process.
func NewStarted() *Started {
	return &Started{keep: startedKeep, running: map[int64]int{}, done: map[int64]time.Time{}}
}

func (s *Started) begin(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[id]++
}

func (s *Started) end(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[id]--; s.running[id] <= 0 {
		delete(s.running, id)
	}
	now := time.Now()
	s.done[id] = now
	if len(s.done)%1024 == 0 {
		for k, t := range s.done {
			if now.Sub(t) > s.keep {
				delete(s.done, k)
			}
		}
	}
}

// Unbegun returns the ids of jobs this process never began, of those
// given: every id neither running here nor returned within startedKeep.
func (s *Started) Unbegun(ids []int64) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []int64
	for _, id := range ids {
		if s.running[id] > 0 {
			continue
		}
		if t, ok := s.done[id]; ok && now.Sub(t) <= s.keep {
			continue
		}
		out = append(out, id)
	}
	return out
}

// startedJobs is the worker middleware that fills a Started.
type startedJobs struct {
	river.WorkerMiddlewareDefaults
	s *Started
}

func (m *startedJobs) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	m.s.begin(job.ID)
	defer m.s.end(job.ID)
	return doInner(ctx)
}
