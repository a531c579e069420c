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
// job's; ?ledger_check=full checks the whole ledger. admin checks requests
// against openapi.json (httpapi.Validator.Router).
func (s *Service) Routes(admin fiber.Router) {
	admin.Get("/reconciliation", s.handleReport)
}

func (s *Service) handleReport(c *fiber.Ctx) error {
	// admin checks ledger_check's value against openapi.json; the one
	// parameter the report takes is this handler's to say.
	full := false
	for k, v := range c.Queries() {
		if k != "ledger_check" {
			return fault.New(fault.Invalid, "GET /v1/admin/reconciliation takes one query parameter, ledger_check, full or incremental (the default)")
		}
		full = v == ledger.ScopeFull
	}
	rep, err := s.run(c.UserContext(), TriggerOnDemand, full)
	if err != nil {
		return err
	}
	return c.JSON(rep)
}
