package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"svc/modules/health"
	"svc/platform/db"
	"svc/platform/metrics"
)

// replicaArea holds the read replica (DATABASE_READ_URL), which svc api
// opens with UseReplica: the worker and svc admin read the primary only.
type replicaArea struct {
	// Replica is nil unless UseReplica opened one.
	Replica *db.Replica
	// stopReplica ends the probe and waits for it.
	stopReplica func()
}

// UseReplica opens DATABASE_READ_URL, when it is set, and gives it to the
// reads where staleness is harmless: a user's transaction history, deposit
// and withdrawal lists, and the operators' lists (withdrawals, the deposit
// review queue, wallet alerts, the audit trail, events). Everything else,
// balances, single resources, idempotency, API keys and every read a
// state change or a money decision makes, keeps reading the primary
// (docs/operations.md, "Reads from a replica"). It must be called before
// HTTP. The replica is probed until Close; /readyz shows it (advisory: its
// loss only sends the lists to the primary) and the metrics count its use.
func (a *App) UseReplica(ctx context.Context) error {
	c := a.Cfg.Database
	if c.ReadURL == "" || a.Replica != nil {
		return nil
	}
	r, err := db.OpenReplica(ctx, c.ReadURL, a.DB, db.ReplicaOptions{MaxLag: c.ReadMaxLag, MaxConns: c.MaxConns, Log: a.Log,
		Pool: []db.Option{db.WithTracer(a.Tracing.Provider)}})
	if err != nil {
		return err
	}
	a.Replica = r
	a.LedgerAPI.Replica, a.Withdrawals.Replica, a.Deposits.Replica, a.AuditAPI.Replica, a.Events.Replica = r, r, r, r, r
	a.Holds.Replica = r
	probe, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	a.stopReplica = func() { stop(); <-done }
	r.Probe(probe) // the first state before the first request
	go func() { defer close(done); r.Run(probe) }()
	a.Health.Checks = append(a.Health.Checks, health.Check{Name: "replica", Advisory: true, Run: func(context.Context) error {
		return replicaProblem(r.State(), r.MaxLag())
	}})
	a.Metrics.RegisterReplica(func() metrics.ReplicaStats {
		s := r.Stats()
		out := metrics.ReplicaStats{InUse: s.State.Status == db.ReplicaOK, Staleness: -1, Served: s.Served, Fallbacks: s.Fallbacks}
		if s.State.Status == db.ReplicaOK || s.State.Status == db.ReplicaLagging {
			out.Staleness = s.State.Staleness.Seconds()
		}
		return out
	})
	return nil
}

// replicaProblem is the replica's readiness detail, in words safe for an
// anonymous caller (no host, no server message: those are logged).
func replicaProblem(s db.ReplicaState, maxLag time.Duration) error {
	switch s.Status {
	case db.ReplicaOK:
		return nil
	case db.ReplicaLagging:
		return fmt.Errorf("at least %s behind the primary (DATABASE_READ_MAX_LAG %s): lists read the primary", s.Staleness.Round(100*time.Millisecond), maxLag)
	case db.ReplicaUnreachable:
		return errors.New("unreachable: lists read the primary (details in the service's logs)")
	}
	return errors.New("not probed yet: lists read the primary")
}

func (a *App) closeReplica() {
	if a.stopReplica != nil {
		a.stopReplica()
	}
	a.Replica.Close()
}
