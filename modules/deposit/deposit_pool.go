package deposit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/platform/btcpay"
)

// poolLockKey serializes the pool's capacity check with the reservations
// it counts, across processes.
const poolLockKey = "svc.deposit.usdt_pool"

// Retry-After bounds of the pool-exhaustion 503: the release job runs
// every minute, and an hour is the longest a reservation waits.
const (
	minPoolRetry = time.Minute
	maxPoolRetry = time.Hour
)

// PoolReleaseEvery is how often the release job returns addresses whose
// reservation has ended.
const PoolReleaseEvery = time.Minute

// Alert types raised by the pool.
const (
	AlertAddressClash   = "deposit.usdt_address_clash"
	AlertAddressUnknown = "deposit.usdt_address_not_in_pool"
)

// pooled reports an asset whose addresses come from the shared pool.
func pooled(code string) bool { return code == asset.USDTTRC20 }

// reservationEnd is when a reservation for an invoice that expires at exp
// ends: the invoice's window plus the grace.
func (s *Service) reservationEnd(exp time.Time) time.Time { return exp.Add(s.Config.USDTPoolGrace) }

// holdPoolSlot takes one of the pool's places for a new USDT deposit inside
// its intent transaction, or answers ErrPoolExhausted (with Retry-After)
// before anything is sent to the processor. The slot becomes the address
// the processor picks once the invoice exists.
func (s *Service) holdPoolSlot(ctx context.Context, tx bun.Tx, d *Deposit, now time.Time) error {
	until := s.reservationEnd(now.Add(USDTExpirationMinutes * time.Minute))
	d.AddressReservedFrom, d.AddressReservedUntil = &now, &until
	if len(s.Config.USDTPool) == 0 {
		return nil // unknown pool: the processor's own refusal is the limit
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", poolLockKey); err != nil {
		return fmt.Errorf("lock the USDT pool: %w", err)
	}
	var held struct {
		N        int        `bun:"n"`
		Earliest *time.Time `bun:"earliest"`
	}
	if err := tx.NewSelect().Model((*Deposit)(nil)).
		ColumnExpr("count(*) AS n, min(address_reserved_until) AS earliest").
		Where("asset = ? AND address_released_at IS NULL AND status <> ?", asset.USDTTRC20, StatusFailed).
		Scan(ctx, &held); err != nil {
		return fmt.Errorf("count USDT reservations: %w", err)
	}
	if held.N < len(s.Config.USDTPool) {
		return nil
	}
	wait := maxPoolRetry
	if held.Earliest != nil {
		wait = min(max(held.Earliest.Sub(now)+minPoolRetry, minPoolRetry), maxPoolRetry)
	}
	return ErrPoolExhausted.WithRetryAfter(wait)
}

// poolRefusal reports the processor's own refusal of a USDT invoice because
// every address of its pool is busy (the plugin's "All your TRON addresses
// are currently waiting payment").
func poolRefusal(err error) bool {
	var re *btcpay.RefusedError
	if !asRefused(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Message)
	for _, f := range re.Fields {
		msg += " " + strings.ToLower(f.Message)
	}
	return strings.Contains(msg, "tron addresses")
}

// recordPoolAddress records the address the processor gave d's invoice
// (expiring at exp) as d's reservation. An address outside the configured
// pool, or one another unreleased reservation holds, is logged and raised
// to the operator; a clash also sends every payment of d to review, since
// a payment to that address may belong to either deposit.
func (s *Service) recordPoolAddress(ctx context.Context, tx bun.Tx, d *Deposit, addr string, exp, now time.Time) error {
	until := s.reservationEnd(exp)
	d.AddressReservedUntil = &until
	if d.AddressReservedFrom == nil || d.AddressReleasedAt != nil {
		d.AddressReservedFrom = &now
	}
	d.AddressReleasedAt = nil
	if len(s.Config.USDTPool) > 0 && !slices.Contains(s.Config.USDTPool, addr) {
		s.log().Error("deposit: the processor gave a USDT invoice an address outside USDT_POOL_ADDRESSES",
			"deposit_id", d.ID, "address", addr)
		if err := s.raise(ctx, tx, alert.Params{Type: AlertAddressUnknown, Subject: addr,
			Detail: fmt.Sprintf("USDT deposit %s got address %s, which is not in USDT_POOL_ADDRESSES: the configured pool differs from the processor's, so the service's pool limit is wrong. Update the setting.", d.ID, addr)}); err != nil {
			return err
		}
	}
	var others []string
	if err := tx.NewSelect().Model((*Deposit)(nil)).Column("id").
		Where("asset = ? AND address = ? AND id <> ? AND address_released_at IS NULL AND status <> ?",
			asset.USDTTRC20, addr, d.ID, StatusFailed).Scan(ctx, &others); err != nil {
		return fmt.Errorf("check USDT address %s: %w", addr, err)
	}
	if len(others) == 0 {
		return nil
	}
	d.AddressClash = true
	s.log().Error("deposit: USDT address clash: the processor handed out an address another open deposit still holds; this deposit's payments go to review",
		"deposit_id", d.ID, "address", addr, "held_by", strings.Join(others, ","))
	return s.raise(ctx, tx, alert.Params{Type: AlertAddressClash, Subject: d.ID.String(),
		Detail: fmt.Sprintf("USDT deposit %s got address %s while deposit(s) %s still held it (within the reservation grace). Payments to %s are sent to review; check the address history before crediting.",
			d.ID, addr, strings.Join(others, ", "), d.ID)})
}

// releaseReservation returns d's address (or slot) to the pool now.
func releaseReservation(ctx context.Context, tx bun.Tx, d *Deposit, now time.Time) error {
	if d.AddressReservedFrom == nil || d.AddressReleasedAt != nil {
		return nil
	}
	if _, err := tx.NewUpdate().Model((*Deposit)(nil)).Set("address_released_at = ?", now).
		Where("id = ? AND address_released_at IS NULL", d.ID).Exec(ctx); err != nil {
		return fmt.Errorf("release USDT reservation of %s: %w", d.ID, err)
	}
	d.AddressReleasedAt = &now
	return nil
}

// ReleasePool returns to the pool every reservation whose time has passed,
// except those of deposits still confirming (the processor keeps their
// invoices' addresses while a payment confirms). It returns how many it
// released.
func (s *Service) ReleasePool(ctx context.Context) (int64, error) {
	now := s.now()
	res, err := s.DB.NewUpdate().Model((*Deposit)(nil)).Set("address_released_at = ?", now).
		Where("asset = ? AND address_released_at IS NULL AND address_reserved_until <= ? AND status <> ?",
			asset.USDTTRC20, now, StatusConfirming).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("release USDT reservations: %w", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		s.log().Info("deposit: USDT addresses returned to the pool", "count", n)
	}
	return n, nil
}

func (s *Service) raise(ctx context.Context, idb bun.IDB, p alert.Params) error {
	if s.Alerts == nil {
		return nil
	}
	if _, _, err := s.Alerts.Raise(ctx, idb, p); err != nil {
		return fmt.Errorf("raise %s alert: %w", p.Type, err)
	}
	return nil
}
