package app

import (
	"context"

	"github.com/riverqueue/river"

	"svc/modules/hold"
)

// holdArea holds the escrow holds (docs/transfers.md, "Escrow holds"): creation, capture,
// void, the reads, and the expiry pass.
type holdArea struct {
	Holds *hold.Service
}

func (a *App) initHolds(context.Context) error {
	a.Holds = &hold.Service{DB: a.DB.Bun, Events: a.Events, Now: a.Clock.Now, Log: a.Log}
	return nil
}

// routesHolds registers the hold endpoints.
func (a *App) routesHolds(r Routers) {
	a.Holds.Routes(r.Checked(r.Platform), r.Idem)
}

// jobsHolds adds the expiry pass (every hold.ExpireEvery), which returns
// the open holds past their expires_at.
func (a *App) jobsHolds(j *Jobs) error {
	river.AddWorker(j.Workers, &hold.ExpireWorker{Service: a.Holds})
	j.AddPeriodic(hold.ExpireEvery, hold.ExpireArgs{})
	j.Recovery = append(j.Recovery, hold.ExpireArgs{})
	return nil
}
