package queue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// jobLogEvery is how often repeated failures of one kind are summed up in
// one line.
const jobLogEvery = 30 * time.Second

// jobLog is River worker middleware that makes failing jobs visible in
// the log (River itself says nothing at info): a failure is logged at warn
// (kind, attempt, error), the last attempt's at error. Repeated failures of
// a kind are folded: the first is logged, then one line per kind every
// jobLogEvery with how many failed meanwhile and the latest error, and one
// when a job of the kind succeeds again, so an outage is a handful of
// lines rather than silence or thousands.
//
// The error's text is the job's wrapped error: the service's errors name
// the operation and never carry a key or a secret (the processor and node
// clients drop URLs and bodies from theirs).
type jobLog struct {
	river.WorkerMiddlewareDefaults
	log   *slog.Logger
	now   func() time.Time
	mu    sync.Mutex
	kinds map[string]*foldState
}

type foldState struct {
	last    time.Time // when a line was last written
	folded  int       // failures since, not written
	lastErr string
}

func newJobLog(log *slog.Logger) *jobLog {
	return &jobLog{log: log, now: time.Now, kinds: map[string]*foldState{}}
}

// recovered writes the failures of a kind still folded when one of its
// jobs succeeds again, so the end of an outage sums it up.
func (m *jobLog) recovered(kind string) {
	m.mu.Lock()
	st := m.kinds[kind]
	if st == nil || st.folded == 0 {
		m.mu.Unlock()
		return
	}
	folded, lastErr := st.folded, st.lastErr
	st.last, st.folded, st.lastErr = m.now(), 0, ""
	m.mu.Unlock()
	m.log.Warn("jobs succeeding again after failures", "kind", kind, "failures_since_last_line", folded, "last_error", lastErr)
}

// Work runs the job and logs its failure.
func (m *jobLog) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	// A run that did no work (another pass of a single-flight kind was
	// running) is no sign that the kind succeeds again.
	skipped, ok := ctx.Value(skipKey{}).(*bool)
	if !ok {
		skipped = new(bool)
		ctx = context.WithValue(ctx, skipKey{}, skipped)
	}
	err := doInner(ctx)
	if err == nil {
		if !*skipped {
			m.recovered(job.Kind)
		}
		return nil
	}
	var cancel *river.JobCancelError
	if errors.As(err, &cancel) || cancelledRemotely(ctx, err) {
		return err
	}
	if interrupted(ctx, err) {
		// Not a failure: River puts the job back in the queue as it was,
		// the attempt uncounted, so it is neither "will retry" nor "last".
		return err
	}
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	if job.Attempt >= job.MaxAttempts {
		m.log.ErrorContext(ctx, "job failed for the last time; it will not be retried", "kind", job.Kind, "job_id", job.ID,
			"attempt", job.Attempt, "error", msg)
		return err
	}
	m.mu.Lock()
	st := m.kinds[job.Kind]
	if st == nil {
		st = &foldState{}
		m.kinds[job.Kind] = st
	}
	now := m.now()
	if !st.last.IsZero() && now.Sub(st.last) < jobLogEvery {
		st.folded++
		st.lastErr = msg
		m.mu.Unlock()
		return err
	}
	folded := st.folded
	st.last, st.folded, st.lastErr = now, 0, ""
	m.mu.Unlock()
	if folded > 0 {
		m.log.WarnContext(ctx, "jobs failing; will retry", "kind", job.Kind, "failures_since_last_line", folded+1,
			"attempt", job.Attempt, "error", msg)
	} else {
		m.log.WarnContext(ctx, "job failed; will retry", "kind", job.Kind, "job_id", job.ID, "attempt", job.Attempt, "error", msg)
	}
	return err
}
