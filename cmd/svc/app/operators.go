package app

import "context"

// The operators' area: the roster's HTTP API (GET /v1/admin/operators,
// POST /v1/admin/operators/changes) on the operator service the audit area
// builds (auditArea.Operators), and the reconciliation's check that the
// enrollment chain verifies and the operators tables agree with it, and
// the verification of an acknowledgement's signature. It is
// initialised after the reconciliation, which it gives that check.
func (a *App) initOperators(context.Context) error {
	a.Reconcile.Operators = a.Operators.Problems
	a.Reconcile.Signatures = a.Operators
	return nil
}

// routesOperators registers the roster's routes on the admin router.
func (a *App) routesOperators(r Routers) { a.Operators.Routes(r.Checked(r.Admin), r.Idem) }
