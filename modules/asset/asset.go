// Package asset owns the assets the service handles (BTC, BTC_LN,
// USDT_TRC20): their scale, whether they are enabled, and the withdrawal
// limits an operator may change at run time. Limits are stored in smallest
// units and shown as decimal strings.
package asset

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/money"
)

// Asset codes.
const (
	BTC       = "BTC"
	BTCLN     = "BTC_LN"
	USDTTRC20 = "USDT_TRC20"
)

// ErrUnknown is returned for an asset the service does not have.
var ErrUnknown = fault.New(fault.NotFound, "unknown asset")

// ErrDisabled is returned for an asset that exists but is not enabled.
var ErrDisabled = fault.New(fault.Unavailable, "asset is not available")

// Asset is one row of the assets table.
type Asset struct {
	bun.BaseModel `bun:"table:assets"`

	Code                string `bun:"asset,pk"`
	DisplayName         string `bun:"display_name"`
	Decimals            int    `bun:"decimals"`
	UnitName            string `bun:"unit_name"`
	PaymentMethod       string `bun:"payment_method"`
	Enabled             bool   `bun:"enabled"`
	WithdrawalMin       int64  `bun:"withdrawal_min"`
	WithdrawalAutoLimit int64  `bun:"withdrawal_auto_limit"`
	WithdrawalDailyCap  int64  `bun:"withdrawal_daily_cap"`
	WithdrawalFlatFee   int64  `bun:"withdrawal_flat_fee"`
	// WithdrawalUserDailyCap is a user's rolling 24-hour total of this
	// asset above which their withdrawals wait for an operator; nil is off.
	WithdrawalUserDailyCap *int64 `bun:"withdrawal_user_daily_cap"`
	// WithdrawalFourEyesThreshold is the gross above which approving a
	// withdrawal needs two different operators; nil is off.
	WithdrawalFourEyesThreshold *int64 `bun:"withdrawal_four_eyes_threshold"`
	// WithdrawalsHaltedSince is set while reconciliation found the asset
	// insolvent or its ledger inconsistent and no operator acknowledged
	// it (modules/reconcile): new withdrawals of it wait for an operator,
	// none is approved or submitted. WithdrawalsHaltedBy says why: the
	// kinds of the episodes that halt it (insolvency, inconsistency).
	WithdrawalsHaltedSince *time.Time `bun:"withdrawals_halted_since"`
	WithdrawalsHaltedBy    []string   `bun:"withdrawals_halted_by,array"`
	UpdatedAt              time.Time  `bun:"updated_at"`
	// Version moves with every change of the row (a trigger, migration
	// 0026): a copy of the row at a version is the row while the version
	// is current.
	Version int64 `bun:"version"`
}

// Format renders smallest units of this asset as a decimal string.
func (a Asset) Format(units int64) string { return money.Format(units, a.Decimals) }

// Store reads and changes assets.
type Store struct {
	DB  bun.IDB
	Now func() time.Time
	// Operators authorizes a change of limits (SetLimitsSigned); nil
	// acts unsigned, as the caller's actor.
	Operators *operator.Service
}

// All returns every asset, enabled or not, by code.
func (s *Store) All(ctx context.Context) ([]Asset, error) {
	var out []Asset
	err := s.DB.NewSelect().Model(&out).Order("asset").Scan(ctx)
	return out, err
}

// Enabled returns the enabled assets by code.
func (s *Store) Enabled(ctx context.Context) ([]Asset, error) {
	var out []Asset
	err := s.DB.NewSelect().Model(&out).Where("enabled").Order("asset").Scan(ctx)
	return out, err
}

// Get returns one asset, enabled or not; ErrUnknown when there is none.
// Real parameters (db.GetModel): most steps of deposits and withdrawals
// read their asset.
func (s *Store) Get(ctx context.Context, code string) (Asset, error) {
	var a Asset
	err := db.GetModel(ctx, s.DB, &a, "WHERE asset = $1", code)
	if db.IsNoRows(err) {
		return Asset{}, ErrUnknown
	}
	return a, err
}

// GetEnabled returns one enabled asset: ErrUnknown when it does not exist,
// ErrDisabled when it is off.
func (s *Store) GetEnabled(ctx context.Context, code string) (Asset, error) {
	a, err := s.Get(ctx, code)
	if err != nil {
		return Asset{}, err
	}
	if !a.Enabled {
		return Asset{}, ErrDisabled
	}
	return a, nil
}

// Limits are the operator-editable withdrawal settings, in smallest units;
// nil leaves a value as it is.
type Limits struct {
	Min, AutoLimit, DailyCap, FlatFee *int64
	// The optional settings: a change to a value or to off.
	UserDailyCap, FourEyesThreshold *Optional
}

// Optional is a change of an optional setting: Off turns it off, else it
// becomes Value.
type Optional struct {
	Value int64
	Off   bool
}

// IsZero reports a Limits that changes nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// LimitSettings name the settings of Limits, in its order, as the signed
// statement's facts name them (SetLimitsExpect); the last two are
// optional, and may be turned off.
var LimitSettings = []string{"withdrawal_min", "withdrawal_auto_limit", "withdrawal_daily_cap", "withdrawal_flat_fee",
	"withdrawal_user_daily_cap", "withdrawal_four_eyes_threshold"}

// Optional reports whether the setting name (LimitSettings) may be
// turned off.
func OptionalSetting(name string) bool {
	return name == "withdrawal_user_daily_cap" || name == "withdrawal_four_eyes_threshold"
}

// Set changes the setting name (LimitSettings) of l to text: an integer
// in the asset's smallest unit (money.ParseUnits), or, for an optional
// setting, "off". svc admin assets set and the console read their
// operators' text with it.
func (l *Limits) Set(name, text string) error {
	opt := map[string]**Optional{"withdrawal_user_daily_cap": &l.UserDailyCap, "withdrawal_four_eyes_threshold": &l.FourEyesThreshold}
	req := map[string]**int64{"withdrawal_min": &l.Min, "withdrawal_auto_limit": &l.AutoLimit, "withdrawal_daily_cap": &l.DailyCap,
		"withdrawal_flat_fee": &l.FlatFee}
	if o, ok := opt[name]; ok && text == "off" {
		*o = &Optional{Off: true}
		return nil
	}
	n, err := money.ParseUnits(text, false)
	if err != nil {
		return err
	}
	if o, ok := opt[name]; ok {
		*o = &Optional{Value: n}
		return nil
	}
	p, ok := req[name]
	if !ok {
		return fmt.Errorf("no withdrawal limit is named %q", name)
	}
	*p = &n
	return nil
}

// limitChange is one setting a Limits changes: its column and its new
// value, or nil to turn it off.
type limitChange struct {
	col   string
	value *int64
}

// changes lists the settings l changes, in a fixed order.
func (l Limits) changes() []limitChange {
	var out []limitChange
	for _, c := range []struct {
		col string
		v   *int64
	}{{"withdrawal_min", l.Min}, {"withdrawal_auto_limit", l.AutoLimit}, {"withdrawal_daily_cap", l.DailyCap}, {"withdrawal_flat_fee", l.FlatFee}} {
		if c.v != nil {
			out = append(out, limitChange{col: c.col, value: c.v})
		}
	}
	for _, c := range []struct {
		col string
		v   *Optional
	}{{"withdrawal_user_daily_cap", l.UserDailyCap}, {"withdrawal_four_eyes_threshold", l.FourEyesThreshold}} {
		switch {
		case c.v == nil:
		case c.v.Off:
			out = append(out, limitChange{col: c.col})
		default:
			v := c.v.Value
			out = append(out, limitChange{col: c.col, value: &v})
		}
	}
	return out
}

// SetLimitsExpect is what an admin signs to set l on asset a: the action
// asset.set_limits on the asset's code, and as facts each setting being
// changed (its column: withdrawal_min, withdrawal_auto_limit,
// withdrawal_daily_cap, withdrawal_flat_fee, withdrawal_user_daily_cap,
// withdrawal_four_eyes_threshold) with its new value in the asset's
// display units, or "off".
func SetLimitsExpect(a Asset, l Limits) operator.Expect {
	facts := map[string]string{}
	for _, c := range l.changes() {
		facts[c.col] = "off"
		if c.value != nil {
			facts[c.col] = a.Format(*c.value)
		}
	}
	return operator.Expect{Action: audit.AssetSetLimits, Resource: a.Code, Facts: facts, Role: operator.Admin}
}

// SetLimits is SetLimitsSigned without a signature: the change is actor's,
// unless signatures are required.
func (s *Store) SetLimits(ctx context.Context, code string, l Limits, actor audit.Actor) (Asset, error) {
	return s.SetLimitsSigned(ctx, code, l, actor, nil)
}

// SetLimitsSigned changes an asset's withdrawal limits and records the
// change in the audit trail, in one transaction. With the asset's row
// locked, the operator service authorizes the change (SetLimitsExpect of
// the asset as it is then): with sig, the enrolled admin who signed it is
// the actor; without, actor (refused when signatures are required).
func (s *Store) SetLimitsSigned(ctx context.Context, code string, l Limits, actor audit.Actor, sig *operator.Envelope) (Asset, error) {
	changes := l.changes()
	params := map[string]any{}
	for _, c := range changes {
		if c.value != nil && *c.value < 0 {
			return Asset{}, fault.New(fault.Invalid, c.col+" must not be negative")
		}
		params[c.col] = nil
		if c.value != nil {
			params[c.col] = *c.value
		}
	}
	if len(changes) == 0 {
		return Asset{}, fault.New(fault.Invalid, "nothing to change")
	}
	now := s.Now().UTC()
	var a Asset
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		var cur Asset
		if err := tx.NewSelect().Model(&cur).Where("asset = ?", code).For("UPDATE").Scan(ctx); err != nil {
			return err
		}
		who, err := s.Operators.Authorize(ctx, tx, actor, sig, SetLimitsExpect(cur, l))
		if err != nil {
			return err
		}
		q := tx.NewUpdate().Model((*Asset)(nil)).Set("updated_at = ?", now)
		for _, c := range changes {
			if c.value == nil {
				q = q.Set("? = NULL", bun.Ident(c.col))
			} else {
				q = q.Set("? = ?", bun.Ident(c.col), *c.value)
			}
		}
		if err := q.Where("asset = ?", code).Returning("*").Scan(ctx, &a); err != nil {
			return err
		}
		_, err = audit.Record(ctx, tx, now, who, audit.AssetSetLimits, code, params)
		return err
	})
	if db.IsNoRows(err) {
		return Asset{}, ErrUnknown
	}
	return a, err
}

// SetEnabled turns an asset on or off (discovery does this; assets are
// never deleted). It reports whether anything changed.
func (s *Store) SetEnabled(ctx context.Context, code string, on bool) (bool, error) {
	res, err := s.DB.NewUpdate().Model((*Asset)(nil)).Set("enabled = ?, updated_at = ?", on, s.Now().UTC()).
		Where("asset = ? AND enabled <> ?", code, on).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
