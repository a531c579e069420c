package asset

import "github.com/gofiber/fiber/v2"

// View is the API's Asset.
type View struct {
	Asset               string `json:"asset"`
	DisplayName         string `json:"display_name"`
	Decimals            int    `json:"decimals"`
	UnitName            string `json:"unit_name"`
	Enabled             bool   `json:"enabled"`
	WithdrawalMin       string `json:"withdrawal_min"`
	WithdrawalAutoLimit string `json:"withdrawal_auto_limit"`
	WithdrawalDailyCap  string `json:"withdrawal_daily_cap"`
	WithdrawalFlatFee   string `json:"withdrawal_flat_fee"`
	// WithdrawalUserDailyCap is beyond the SPEC: a user's rolling 24-hour
	// total of the asset above which their withdrawals wait for an
	// operator; null when there is none.
	WithdrawalUserDailyCap *string `json:"withdrawal_user_daily_cap"`
}

// ToView renders an asset with its limits in display units.
func ToView(a Asset) View {
	var userCap *string
	if a.WithdrawalUserDailyCap != nil {
		s := a.Format(*a.WithdrawalUserDailyCap)
		userCap = &s
	}
	return View{WithdrawalUserDailyCap: userCap,
		Asset: a.Code, DisplayName: a.DisplayName, Decimals: a.Decimals, UnitName: a.UnitName, Enabled: a.Enabled,
		WithdrawalMin: a.Format(a.WithdrawalMin), WithdrawalAutoLimit: a.Format(a.WithdrawalAutoLimit),
		WithdrawalDailyCap: a.Format(a.WithdrawalDailyCap), WithdrawalFlatFee: a.Format(a.WithdrawalFlatFee),
	}
}

// Routes registers GET /assets on the platform router.
func (s *Store) Routes(r fiber.Router) {
	r.Get("/assets", func(c *fiber.Ctx) error {
		list, err := s.Enabled(c.UserContext())
		if err != nil {
			return err
		}
		out := make([]View, 0, len(list))
		for _, a := range list {
			out = append(out, ToView(a))
		}
		return c.JSON(fiber.Map{"assets": out})
	})
}
