package app

import (
	"context"
	"net"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/config"
)

// auditArea holds the operator audit trail's HTTP API. Entries are written
// by the areas whose operator actions they record (audit.Record inside each
// action's own transaction); this area only reads them. It is initialised
// before the areas that record.
//
// Operators verifies the operators' signed actions for every area that
// takes one (modules/operator).
type auditArea struct {
	AuditAPI  *audit.API
	Operators *operator.Service
}

func (a *App) initAudit(context.Context) error {
	a.AuditAPI = &audit.API{DB: a.DB.Bun}
	a.Operators = &operator.Service{DB: a.DB.Bun, Required: a.Cfg.SignaturesRequired(), Now: a.Clock.Now,
		RP: RelyingParty(a.Cfg)}
	return nil
}

// RelyingParty is the operators' WebAuthn identity of cfg: its RP id, and
// its origins (OPERATOR_WEBAUTHN_ORIGINS; by default https:// of the RP id,
// and http:// too outside production, and the console's own origin: the RP
// id on CONSOLE_ADDR's port, https:// when the console serves HTTPS, else
// http://).
func RelyingParty(cfg config.Config) operator.RelyingParty {
	rp := operator.RelyingParty{ID: cfg.Operators.WebAuthnRPID, Origins: cfg.Operators.WebAuthnOrigins}
	if len(rp.Origins) == 0 {
		rp.Origins = []string{"https://" + rp.ID}
		if !cfg.Production() {
			rp.Origins = append(rp.Origins, "http://"+rp.ID)
		}
		if _, port, err := net.SplitHostPort(cfg.Console.Addr); err == nil && port != "0" {
			scheme := "http://"
			if cfg.Console.TLS() {
				scheme = "https://"
			}
			rp.Origins = append(rp.Origins, scheme+net.JoinHostPort(rp.ID, port))
		}
	}
	return rp
}

// routesAudit registers GET /v1/admin/audit.
func (a *App) routesAudit(r Routers) { a.AuditAPI.Routes(r.Checked(r.Admin)) }

// jobsAudit adds nothing: the trail is never pruned.
func (a *App) jobsAudit(*Jobs) error { return nil }
