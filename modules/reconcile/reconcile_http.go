package reconcile

import (
	"github.com/gofiber/fiber/v2"

	"svc/platform/fault"
)

// Routes registers, on the admin router (/v1/admin, admin scope):
//
//	GET /reconciliation   the report, computed now (and stored in the history)
//
// It is the computation the hourly job runs, episodes included: a report
// read on demand can halt an insolvent asset's withdrawals, or lift a halt
// once the asset is solvent again.
func (s *Service) Routes(admin fiber.Router) {
	admin.Get("/reconciliation", s.handleReport)
}

func (s *Service) handleReport(c *fiber.Ctx) error {
	if len(c.Queries()) > 0 {
		return fault.New(fault.Invalid, "GET /v1/admin/reconciliation takes no query parameters")
	}
	rep, err := s.Run(c.UserContext(), TriggerOnDemand)
	if err != nil {
		return err
	}
	return c.JSON(rep)
}
