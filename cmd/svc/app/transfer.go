package app

import (
	"context"

	"svc/modules/transfer"
)

// transferArea holds the transfer module: money moved between users and
// platform accounts inside the service (docs/transfers.md). It is
// initialised after the event area, whose emitter it uses.
type transferArea struct {
	Transfers *transfer.Service
}

func (a *App) initTransfers(context.Context) error {
	a.Transfers = &transfer.Service{DB: a.DB.Bun, Events: a.Events, Now: a.Clock.Now, Log: a.Log}
	return nil
}

// routesTransfers registers the transfer endpoints (docs/transfers.md).
// The account lists read the replica when svc api opened one (UseReplica
// runs before HTTP); without one they read the primary.
func (a *App) routesTransfers(r Routers) {
	a.Transfers.Replica = a.Replica
	a.Transfers.Routes(r.Checked(r.Platform), r.ClaimIn)
}
