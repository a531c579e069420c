// Package jobs holds the River jobs that belong to no single module, thin
// workers that call modules, and the helper that builds periodic schedules.
// Job arguments carry ids, never copies of state; every worker is safe to
// run twice.
package jobs

import (
	"time"

	"github.com/riverqueue/river"
)

// Periodic returns a job inserted every interval, and once when a worker
// becomes leader, by the elected leader. It is deliberately not unique per
// period: that would skip the start-up run of a worker restarted within the
// interval. A hand-over between leaders can therefore run a job twice, which
// every periodic worker must tolerate (they all are idempotent). The app
// schedules them with Jobs.AddPeriodic, which also makes each kind
// single-flight: one pass at a time across every worker.
func Periodic(every time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(every),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
}
