package queue

import (
	"context"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// startedKeep is how long Started remembers a job: far beyond the Grace
// after which DeadWorkerRescue looks at a job, and beyond any job's run.
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
type Started struct {
	mu sync.Mutex
	at map[int64]time.Time
}

// NewStarted returns an empty record; give it to WorkerParams.Started and
// DeadWorkerRescue.Started of the same process.
func NewStarted() *Started { return &Started{at: map[int64]time.Time{}} }

func (s *Started) add(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.at[id] = now
	if len(s.at)%1024 == 0 {
		for k, t := range s.at {
			if now.Sub(t) > startedKeep {
				delete(s.at, k)
			}
		}
	}
}

// IDs returns the jobs begun within startedKeep.
func (s *Started) IDs() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	ids := make([]int64, 0, len(s.at))
	for k, t := range s.at {
		if now.Sub(t) > startedKeep {
			delete(s.at, k)
			continue
		}
		ids = append(ids, k)
	}
	return ids
}

// startedJobs is the worker middleware that fills a Started.
type startedJobs struct {
	river.WorkerMiddlewareDefaults
	s *Started
}

func (m *startedJobs) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	m.s.add(job.ID)
	return doInner(ctx)
}
