package app

import (
	"svc/modules/liabilities"
	"svc/platform/background"
)

// liabilitiesArea holds the proof of liabilities: the snapshots (taken by
// the hourly reconciliation and svc admin liabilities snapshot), GET
// /v1/admin/liabilities, GET /v1/users/{external_user_id}/liabilities-proof
// and its platform account's twin, GET
// /v1/platform-accounts/{platform_account}/liabilities-proof (the
// platform router, readwrite). The reconciliation area initialises and
// routes it, as the hourly report takes its snapshots.
type liabilitiesArea struct {
	Liabilities    *liabilities.Service
	LiabilitiesAPI *liabilities.API
}

func (a *App) initLiabilities() {
	// Snapshots run at the lowest priority, on one core (the CPU the
	// writers leave; docs/performance.md).
	a.Liabilities = &liabilities.Service{Pool: a.DB.Pool, Log: a.Log, Nice: background.Nice, Workers: 1}
	a.LiabilitiesAPI = &liabilities.API{Service: a.Liabilities, Assets: a.DB.Bun}
}

func (a *App) routesLiabilities(r Routers) {
	a.LiabilitiesAPI.Routes(r.Checked(r.Platform), r.Checked(r.Admin))
}
