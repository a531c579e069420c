package app

import (
	"context"

	"svc/modules/audit"
)

// auditArea holds the operator audit trail's HTTP API. Entries are written
// by the areas whose operator actions they record (audit.Record inside each
// action's own transaction); this area only reads them. It is initialised
// before the areas that record.
type auditArea struct {
	AuditAPI *audit.API
}

func (a *App) initAudit(context.Context) error {
	a.AuditAPI = &audit.API{DB: a.DB.Bun}
	return nil
}

// routesAudit registers GET /v1/admin/audit.
func (a *App) routesAudit(r Routers) { a.AuditAPI.Routes(r.Checked(r.Admin)) }

// jobsAudit adds nothing: the trail is never pruned.
func (a *App) jobsAudit(*Jobs) error { return nil }
