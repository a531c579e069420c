package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"svc/modules/asset"
	"svc/modules/operator"
)

// The assets page shows what svc admin assets list shows (asset.Store.All
// in display units: enabled, the withdrawal minimum, the auto-approval
// limit, the daily cap, the flat fee, a user's daily cap and the
// four-eyes threshold), and changes an asset's withdrawal limits as svc
// admin assets set --key does: asset.SetLimitsExpect signed by the
// operator's passkey (the admin role), applied by SetLimitsSigned. The
// form takes, like the command, integers in the asset's smallest unit
// (or off for the two optional settings); a field left empty is left as
// it is.

type assetRow struct {
	asset.View
	UserDailyCap, FourEyes string
	Halted                 string
}

func toAssetRow(a asset.Asset) assetRow {
	r := assetRow{View: asset.ToView(a), UserDailyCap: optionalLimit(a, a.WithdrawalUserDailyCap), FourEyes: optionalLimit(a, a.WithdrawalFourEyesThreshold)}
	if a.WithdrawalsHaltedSince != nil {
		r.Halted = strings.Join(a.WithdrawalsHaltedBy, ", ")
	}
	return r
}

// optionalLimit renders an optional setting as svc admin assets list does.
func optionalLimit(a asset.Asset, v *int64) string {
	if v == nil {
		return "off"
	}
	return a.Format(*v)
}

func (s *Server) handleAssets(w http.ResponseWriter, r *http.Request) {
	all, err := s.opts.Assets.All(r.Context())
	if err != nil {
		s.unreadable(w, r, "assets", err)
		return
	}
	rows := make([]assetRow, len(all))
	for i, a := range all {
		rows[i] = toAssetRow(a)
	}
	s.render(w, r, http.StatusOK, "assets.html", page{Title: "Assets and limits", Data: rows})
}

// limitField is one field of the limits form: its current value in the
// smallest unit the input takes, with the unit's name ("off" when unset).
type limitField struct {
	Name, Label, Current string
	Optional             bool
}

type assetForm struct {
	Asset  assetRow
	Unit   string // the smallest unit's name
	Fields []limitField
}

// smallestUnit is the name of a's smallest unit.
func smallestUnit(a asset.Asset) string {
	if a.UnitName == "" {
		return "smallest units"
	}
	return a.UnitName
}

func limitFields(a asset.Asset) []limitField {
	units := func(v int64) string { return fmt.Sprintf("%d %s", v, smallestUnit(a)) }
	optional := func(v *int64) string {
		if v == nil {
			return "off"
		}
		return units(*v)
	}
	return []limitField{
		{"withdrawal_min", "Smallest withdrawal", units(a.WithdrawalMin), false},
		{"withdrawal_auto_limit", "Auto-approval limit", units(a.WithdrawalAutoLimit), false},
		{"withdrawal_daily_cap", "Daily cap (rolling 24 hours)", units(a.WithdrawalDailyCap), false},
		{"withdrawal_flat_fee", "Flat fee", units(a.WithdrawalFlatFee), false},
		{"withdrawal_user_daily_cap", "A user's daily cap", optional(a.WithdrawalUserDailyCap), true},
		{"withdrawal_four_eyes_threshold", "Four-eyes threshold", optional(a.WithdrawalFourEyesThreshold), true},
	}
}

func (s *Server) handleAssetForm(w http.ResponseWriter, r *http.Request) {
	a, err := s.opts.Assets.Get(r.Context(), r.PathValue("code"))
	if err != nil {
		s.refused(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "asset_limits.html", page{Title: "Limits of " + a.Code, Data: assetForm{Asset: toAssetRow(a), Unit: smallestUnit(a), Fields: limitFields(a)}})
}

// limitsChange is the change of the path's asset's limits the request
// gives (pages.go's action).
func (s *Server) limitsChange(w http.ResponseWriter, r *http.Request, get func(string) string) *signedPage {
	a, err := s.opts.Assets.Get(r.Context(), r.PathValue("code"))
	if err != nil {
		s.refused(w, r, err)
		return nil
	}
	var l asset.Limits
	var given []hidden
	for _, name := range asset.LimitSettings {
		v := strings.TrimSpace(get(name))
		if v == "" {
			continue
		}
		if err := l.Set(name, v); err != nil {
			s.fail(w, r, http.StatusUnprocessableEntity, fmt.Sprintf("%s %q: %v (an integer in the smallest unit%s).", name, v, err,
				map[bool]string{true: ", or off"}[asset.OptionalSetting(name)]))
			return nil
		}
		given = append(given, hidden{name, v})
	}
	if l.IsZero() {
		s.fail(w, r, http.StatusUnprocessableEntity, "Nothing to change: fill in at least one field.")
		return nil
	}
	return &signedPage{Heading: "Change the limits of " + a.Code + " (display units)", Button: "Change with passkey", Back: "/limits/" + a.Code,
		Hidden: given, Expect: asset.SetLimitsExpect(a, l),
		Run: func(ctx context.Context, env *operator.Envelope) (string, error) {
			_, err := s.opts.Assets.SetLimitsSigned(ctx, a.Code, l, zeroActor, env)
			return fmt.Sprintf("The limits of %s are changed.", a.Code), err
		}}
}
