// Package discovery turns the assets on and off from what the payment
// processor's store offers: BTC when the store has BTC-CHAIN, BTC_LN when
// the deployment opts in to Lightning and the store has BTC-LN, USDT_TRC20
// when the store has USDT-TRON (the USDt plugin's method). It runs when the
// worker starts and then periodically. An asset whose method appears is
// enabled at once. One whose method is missing is disabled (never deleted)
// only after MissesToDisable consecutive runs without it, so one empty or
// partial answer from a store being reconfigured does not stop deposits,
// and each disabling raises an operator alert: deposits of that asset
// stop. The count lives in the worker's memory (periodic jobs run on one
// leader), so a restart only delays a disabling. When the processor cannot
// be asked, nothing changes. Balances are not affected either way: a
// user's money in a disabled asset is still listed.
package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/platform/btcpay"
	"svc/platform/logging"
	"svc/platform/queue"
)

// Methods lists the processor store's payment methods.
type Methods interface {
	StorePaymentMethods(ctx context.Context, onlyEnabled bool) ([]btcpay.StorePaymentMethod, error)
}

// Alerter raises operator alerts (*alert.Service).
type Alerter interface {
	Raise(ctx context.Context, idb bun.IDB, p alert.Params) (alert.Alert, bool, error)
}

// DefaultMissesToDisable is how many consecutive runs without an asset's
// payment method disable it, in the service's wiring.
const DefaultMissesToDisable = 3

// Service runs discovery.
type Service struct {
	Processor        Methods
	Assets           *asset.Store
	LightningEnabled bool // the deployment's LIGHTNING_ENABLED
	// MissesToDisable is how many consecutive runs must miss an asset's
	// method before it is disabled; 0 or 1 disables at the first.
	MissesToDisable int
	Alerts          Alerter // nil: no alert
	Log             *slog.Logger

	mu     sync.Mutex
	misses map[string]int
}

// Change is one asset turned on or off.
type Change struct {
	Asset   string
	Enabled bool
}

// Result is what one run found and did.
type Result struct {
	Methods []string // the store's enabled payment methods, normalized
	Changes []Change
}

// Run reads the store's enabled payment methods and sets every asset's
// enabled flag to match. On an error from the processor it changes nothing.
func (s *Service) Run(ctx context.Context) (Result, error) {
	ms, err := s.Processor.StorePaymentMethods(ctx, true)
	if err != nil {
		return Result{}, fmt.Errorf("discovery: %w", err)
	}
	var res Result
	for _, m := range ms {
		if m.Enabled {
			res.Methods = append(res.Methods, btcpay.NormalizeMethodID(m.PaymentMethodID))
		}
	}
	assets, err := s.Assets.All(ctx)
	if err != nil {
		return res, fmt.Errorf("discovery: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.misses == nil {
		s.misses = map[string]int{}
	}
	for _, a := range assets {
		want := offered(a.PaymentMethod, res.Methods)
		optedOut := a.Code == asset.BTCLN && !s.LightningEnabled
		if optedOut {
			want = false
		}
		if want {
			s.misses[a.Code] = 0
		} else if !optedOut && a.Enabled {
			s.misses[a.Code]++
			if s.misses[a.Code] < max(1, s.MissesToDisable) {
				s.log().WarnContext(ctx, "discovery: the store did not list an enabled asset's payment method; not disabled yet",
					"asset", a.Code, "payment_method", a.PaymentMethod, "misses", s.misses[a.Code], "disable_after", s.MissesToDisable)
				continue
			}
		}
		changed, err := s.Assets.SetEnabled(ctx, a.Code, want)
		if err != nil {
			return res, fmt.Errorf("discovery: set %s: %w", a.Code, err)
		}
		if changed {
			res.Changes = append(res.Changes, Change{Asset: a.Code, Enabled: want})
			s.log().InfoContext(ctx, "asset availability changed by discovery", "asset", a.Code, "enabled", want,
				"payment_method", a.PaymentMethod)
			if !want && !optedOut {
				s.alertDisabled(ctx, a)
			}
		}
	}
	return res, nil
}

// offered reports whether method is among the store's methods. For the
// USDT plugin's TRON method, any USDT-on-TRON id is accepted, as its
// naming has changed between plugin versions.
func offered(method string, methods []string) bool {
	want := btcpay.NormalizeMethodID(method)
	for _, m := range methods {
		if m == want {
			return true
		}
		if want == btcpay.MethodUSDTTron && strings.Contains(m, "USDT") && strings.Contains(m, "TRON") {
			return true
		}
	}
	return false
}

// alertDisabled tells the operators that deposits of a stopped: the
// store no longer offers its payment method.
func (s *Service) alertDisabled(ctx context.Context, a asset.Asset) {
	if s.Alerts == nil {
		return
	}
	now := time.Now().UTC()
	detail := fmt.Sprintf("%s was disabled at %s: the processor's store has not listed its payment method %s in %d consecutive discovery runs. "+
		"New %s deposits answer 503 until the method is back; balances and withdrawals are unaffected. Check the store's payment methods.",
		a.Code, now.Format(time.RFC3339), a.PaymentMethod, max(1, s.MissesToDisable), a.Code)
	if _, _, err := s.Alerts.Raise(ctx, s.Assets.DB, alert.Params{Type: "asset.disabled_by_discovery",
		Subject: a.Code + " " + now.Format(time.RFC3339), Detail: detail}); err != nil {
		s.log().ErrorContext(ctx, "discovery: raise alert", "asset", a.Code, "error", err)
	}
}

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

// Args asks for one discovery run (periodic, and once when the worker
// starts).
type Args struct{}

// Kind is the job kind.
func (Args) Kind() string { return "processor_discovery" }

// InsertOpts keeps a failing run from retrying for long: the next period
// runs it again anyway.
func (Args) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 3} }

// Pass runs one discovery.
func (Args) Pass(ctx context.Context, s *Service) error { return queue.Err(s.Run(ctx)) }

// Worker runs discovery.
type Worker = queue.Pass[Args, *Service]
