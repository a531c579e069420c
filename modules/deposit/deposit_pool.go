package deposit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
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
// pool is logged and raised to the operator (the configured pool is wrong).
// An address another open deposit (creating, pending, confirming) still
// holds is a clash: logged, raised, and every payment of d goes to review,
// since a payment to that address may belong to either deposit. An address
// still inside the grace of a closed deposit is normal with the plugin
// (it reuses an address as soon as its invoice closes); payments that
// arrive inside that grace are sent to review by the reconcile.
func (s *Service) recordPoolAddress(ctx context.Context, tx bun.Tx, d *Deposit, addr string, exp, now time.Time) error {
	until := s.reservationEnd(exp)
	d.AddressReservedUntil = &until
	if d.AddressReservedFrom == nil || d.AddressReleasedAt != nil {
		d.AddressReservedFrom = &now
	}
	d.AddressReleasedAt = nil
	if len(s.Config.USDTPool) > 0 && !slices.Contains(s.Config.USDTPool, addr) {
		s.log().ErrorContext(ctx, "deposit: the processor gave a USDT invoice an address outside USDT_POOL_ADDRESSES",
			"deposit_id", d.ID, "address", addr)
		if err := s.raise(ctx, tx, alert.Params{Type: AlertAddressUnknown, Subject: addr,
			Detail: fmt.Sprintf("USDT deposit %s got address %s, which is not in USDT_POOL_ADDRESSES: the configured pool differs from the processor's, so the service's pool limit is wrong. Update the setting.", d.ID, addr)}); err != nil {
			return err
		}
	}
	holders, err := poolHolders(ctx, tx, d, addr)
	if err != nil {
		return err
	}
	var open []string
	for _, h := range holders {
		switch h.Status {
		case StatusCreating, StatusPending, StatusConfirming:
			open = append(open, h.ID.String())
		default:
			s.log().InfoContext(ctx, "deposit: the processor reused a USDT address inside another deposit's grace; payments inside the grace go to review",
				"deposit_id", d.ID, "address", addr, "previous_deposit_id", h.ID, "previous_status", h.Status)
		}
	}
	if len(open) == 0 {
		return nil
	}
	d.AddressClash = true
	s.log().ErrorContext(ctx, "deposit: USDT address clash: the processor handed out an address another open deposit still holds; this deposit's payments go to review",
		"deposit_id", d.ID, "address", addr, "held_by", strings.Join(open, ","))
	return s.raise(ctx, tx, alert.Params{Type: AlertAddressClash, Subject: d.ID.String(),
		Detail: fmt.Sprintf("USDT deposit %s got address %s while open deposit(s) %s still held it. Payments to %s are sent to review; check the address history before crediting.",
			d.ID, addr, strings.Join(open, ", "), d.ID)})
}

// holder is another deposit's reservation of a pooled address.
type holder struct {
	ID        uuid.UUID  `bun:"id"`
	Status    Status     `bun:"status"`
	From      *time.Time `bun:"address_reserved_from"`
	Until     *time.Time `bun:"address_reserved_until"`
	ExpiresAt *time.Time `bun:"expires_at"`
	Released  *time.Time `bun:"address_released_at"`
}

// end is when the reservation ended (or ends).
func (h holder) end() time.Time {
	if h.Released != nil && (h.Until == nil || h.Released.Before(*h.Until)) {
		return *h.Released
	}
	if h.Until == nil {
		return time.Time{}
	}
	return *h.Until
}

// poolHolders returns the other deposits whose reservation of addr is not
// released.
func poolHolders(ctx context.Context, idb bun.IDB, d *Deposit, addr string) ([]holder, error) {
	var out []holder
	if err := idb.NewSelect().Model((*Deposit)(nil)).
		Column("id", "status", "address_reserved_from", "address_reserved_until", "expires_at", "address_released_at").
		Where("asset = ? AND address = ? AND id <> ? AND address_released_at IS NULL AND status <> ?",
			asset.USDTTRC20, addr, d.ID, StatusFailed).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("check USDT address %s: %w", addr, err)
	}
	return out, nil
}

// graceHolders returns the other deposits that held d's pooled address
// before d and were not settled: a payment to the address that arrives
// before such a reservation ended may be that deposit's late payment.
func graceHolders(ctx context.Context, idb bun.IDB, d Deposit) ([]holder, error) {
	if !pooled(d.Asset) || d.Address == nil || d.AddressReservedFrom == nil {
		return nil, nil
	}
	var out []holder
	if err := idb.NewSelect().Model((*Deposit)(nil)).
		Column("id", "status", "address_reserved_from", "address_reserved_until", "expires_at", "address_released_at").
		Where("asset = ? AND address = ? AND id <> ? AND status NOT IN (?) AND address_reserved_from < ?",
			asset.USDTTRC20, *d.Address, d.ID, bun.List([]Status{StatusFailed, StatusSettled}), d.AddressReservedFrom).
		Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("check the grace of USDT address %s: %w", *d.Address, err)
	}
	return out, nil
}

// inGrace returns the holder whose reservation covers t, if any.
func inGrace(holders []holder, t time.Time) (holder, bool) {
	for _, h := range holders {
		if t.Before(h.end()) {
			return h, true
		}
	}
	return holder{}, false
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
		s.log().InfoContext(ctx, "deposit: USDT addresses returned to the pool", "count", n)
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
