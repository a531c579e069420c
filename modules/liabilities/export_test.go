package liabilities

import (
	"context"
	"time"
)

// Phases runs a snapshot as Snapshot does and times its three phases: the
// read-only transaction, the trees, the write transaction.
func (s *Service) Phases(ctx context.Context) (read, build, store time.Duration, out []Published, err error) {
	t0 := time.Now()
	takenAt, trees, err := s.read(ctx)
	if err != nil {
		return
	}
	t1 := time.Now()
	if err = buildAll(trees, s.Workers); err != nil {
		return
	}
	t2 := time.Now()
	out, err = s.store(ctx, takenAt, TriggerOnDemand, "", trees)
	return t1.Sub(t0), t2.Sub(t1), time.Since(t2), out, err
}
