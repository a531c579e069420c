package liabilities

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Phases runs a snapshot as Snapshot does and times its three phases: the
// read, the trees, the writes (all in one repeatable-read transaction).
func (s *Service) Phases(ctx context.Context) (read, build, store time.Duration, out []Published, err error) {
	err = pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		t0 := time.Now()
		trees, err := s.read(ctx, tx)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if err = buildAll(trees, s.Workers); err != nil {
			return err
		}
		t2 := time.Now()
		out, err = s.store(ctx, tx, TriggerOnDemand, "", trees)
		read, build, store = t1.Sub(t0), t2.Sub(t1), time.Since(t2)
		return err
	})
	return
}
