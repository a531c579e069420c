package reconcile

import (
	"github.com/gofiber/fiber/v2"

	"svc/modules/ledger"
	"svc/platform/fault"
)

// Routes registers, on the admin router (/v1/admin, admin scope):
//
//	GET /reconciliation   the report, computed now (and stored in the history)
//
// It is the computation the hourly job runs, episodes included: a report
// read on demand can halt an insolvent asset's withdrawals, or lift a halt
// once the asset is solvent again. Its ledger check is incremental, as the
// job's; ?ledger_check=full checks the whole ledger.
func (s *Service) Routes(admin fiber.Router) {
	admin.Get("/reconciliation", s.handleReport)
}

func (s *Service) handleReport(c *fiber.Ctx) error {
	full := false
	for k, v := range c.Queries() {
		switch {
		case k == "ledger_check" && v == ledger.ScopeFull:
			full = true
		case k == "ledger_check" && v == ledger.ScopeIncremental:
		default:
			return fault.New(fault.Invalid, "GET /v1/admin/reconciliation takes one query parameter, ledger_check, full or incremental (the default)")
		}
	}
	rep, err := s.run(c.UserContext(), TriggerOnDemand, full)
	if err != nil {
		return err
	}
	return c.JSON(rep)
}
