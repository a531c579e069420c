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

	Code                string    `bun:"asset,pk"`
	DisplayName         string    `bun:"display_name"`
	Decimals            int       `bun:"decimals"`
	UnitName            string    `bun:"unit_name"`
	PaymentMethod       string    `bun:"payment_method"`
	Enabled             bool      `bun:"enabled"`
	WithdrawalMin       int64     `bun:"withdrawal_min"`
	WithdrawalAutoLimit int64     `bun:"withdrawal_auto_limit"`
	WithdrawalDailyCap  int64     `bun:"withdrawal_daily_cap"`
	WithdrawalFlatFee   int64     `bun:"withdrawal_flat_fee"`
	UpdatedAt           time.Time `bun:"updated_at"`
}

// Format renders smallest units of this asset as a decimal string.
func (a Asset) Format(units int64) string { return money.Format(units, a.Decimals) }

// Store reads and changes assets.
type Store struct {
	DB  bun.IDB
	Now func() time.Time
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
func (s *Store) Get(ctx context.Context, code string) (Asset, error) {
	var a Asset
	err := s.DB.NewSelect().Model(&a).Where("asset = ?", code).Scan(ctx)
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
}

// SetLimits changes an asset's withdrawal limits.
func (s *Store) SetLimits(ctx context.Context, code string, l Limits) (Asset, error) {
	q := s.DB.NewUpdate().Model((*Asset)(nil)).Set("updated_at = ?", s.Now().UTC())
	for col, v := range map[string]*int64{"withdrawal_min": l.Min, "withdrawal_auto_limit": l.AutoLimit,
		"withdrawal_daily_cap": l.DailyCap, "withdrawal_flat_fee": l.FlatFee} {
		if v == nil {
			continue
		}
		if *v < 0 {
			return Asset{}, fmt.Errorf("%s must not be negative", col)
		}
		q = q.Set("? = ?", bun.Ident(col), *v)
	}
	var a Asset
	err := q.Where("asset = ?", code).Returning("*").Scan(ctx, &a)
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
