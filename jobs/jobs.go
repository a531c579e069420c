// Package jobs holds the River jobs that belong to no single module, thin
// workers that call modules, and the helper that builds periodic schedules.
// Job arguments carry ids, never copies of state; every worker is safe to
// run twice.
package jobs

import (
	"time"

	"github.com/riverqueue/river"
)

// Periodic returns a job inserted every interval (and once at start) by the
// elected leader. Its kind is its id, and each period's insert is unique,
// so two leaders in a hand-over cannot double it.
func Periodic(every time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(every),
		func() (river.JobArgs, *river.InsertOpts) {
			return args, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByPeriod: every}}
		},
		&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
}
