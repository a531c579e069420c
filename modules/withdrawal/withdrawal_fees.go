package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/platform/btcpay"
	"svc/platform/fault"
)

// DefaultFeeRateTTL is how long a BTC fee rate is reused when the
// configuration does not say.
const DefaultFeeRateTTL = 30 * time.Second

// minFeeRate is the lowest fee rate used, in sat/vB: a payout below the
// network's minimum relay fee would never confirm.
var minFeeRate = btcpay.AmountFromUnits(1, 0)

// rateCache keeps the last BTC fee rate for a short while, so that a burst
// of withdrawals asks the processor once.
type rateCache struct {
	mu   sync.Mutex
	rate btcpay.Amount
	at   time.Time
	ok   bool
}

// feeRate returns the processor's fee rate in sat/vB, from the cache when
// it is fresh. Any failure is ErrFeeUnavailable (503) and is not cached.
func (s *Service) feeRate(ctx context.Context) (btcpay.Amount, error) {
	ttl := s.Config.FeeRateTTL
	if ttl <= 0 {
		ttl = DefaultFeeRateTTL
	}
	now := s.Now()
	s.rates.mu.Lock()
	if s.rates.ok && now.Sub(s.rates.at) < ttl && !now.Before(s.rates.at) {
		r := s.rates.rate
		s.rates.mu.Unlock()
		return r, nil
	}
	s.rates.mu.Unlock()
	if s.Fees == nil {
		return btcpay.Amount{}, ErrFeeUnavailable
	}
	rate, err := s.Fees.FeeRate(ctx, 0)
	if err != nil {
		return btcpay.Amount{}, fault.Wrap(fault.Unavailable, ErrFeeUnavailable.Message, err)
	}
	if rate.Cmp(minFeeRate) < 0 {
		rate = minFeeRate
	}
	s.rates.mu.Lock()
	s.rates.rate, s.rates.at, s.rates.ok = rate, now, true
	s.rates.mu.Unlock()
	return rate, nil
}

// ForgetFeeRate drops the fee rate kept for reuse, so that the next
// estimate or submission of this process asks the processor (the
// sandbox's fee_rate helper, after it changed the simulator's).
func (s *Service) ForgetFeeRate() {
	s.rates.mu.Lock()
	s.rates.ok = false
	s.rates.mu.Unlock()
}

// Estimate is the fee and net amount a withdrawal is expected to have.
// The real fee is fixed at submission; the estimate decides dust, the
// minimum and a BOLT11 invoice's amount.
type Estimate struct {
	Fee int64 // BTC: fee rate x assumed size; USDT_TRC20 and BTC_LN: the flat fee
	Net int64 // what the destination would receive
}

// estimate computes the fee and net of gross for asset a under the
// configured fee mode.
func (s *Service) estimate(ctx context.Context, a asset.Asset, gross int64) (Estimate, error) {
	var fee int64
	switch a.Code {
	case asset.BTC:
		rate, err := s.feeRate(ctx)
		if err != nil {
			return Estimate{}, err
		}
		if fee, err = rate.MulCeil(s.Config.AssumedTxVBytes); err != nil {
			return Estimate{}, fmt.Errorf("BTC fee estimate: %w", err)
		}
	default:
		fee = a.WithdrawalFlatFee
	}
	return netOf(s.Config.FeeMode, gross, fee)
}

// errFeeAboveAmount: under deduct the fee eats the whole amount.
var errFeeAboveAmount = errors.New("fee above amount")

// netOf applies the fee mode: deduct takes the fee out of the gross, absorb
// pays the whole gross (the service bears the fee, and the user's fee is
// 0).
func netOf(mode ledger.FeeMode, gross, fee int64) (Estimate, error) {
	if mode == ledger.FeeAbsorb {
		return Estimate{Fee: 0, Net: gross}, nil
	}
	if fee >= gross {
		return Estimate{Fee: fee}, errFeeAboveAmount
	}
	return Estimate{Fee: fee, Net: gross - fee}, nil
}
