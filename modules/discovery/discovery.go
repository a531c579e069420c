// Package discovery turns the assets on and off from what the payment
// processor's store offers: BTC when the store has BTC-CHAIN, BTC_LN when
// the deployment opts in to Lightning and the store has BTC-LN, USDT_TRC20
// when the store has USDT-TRON (the USDt plugin's method). It runs when the
// worker starts and then periodically. An asset whose method disappears is
// disabled, never deleted; when the processor cannot be asked, nothing
// changes.
package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/riverqueue/river"

	"svc/modules/asset"
	"svc/platform/btcpay"
)

// Methods lists the processor store's payment methods.
type Methods interface {
	StorePaymentMethods(ctx context.Context, onlyEnabled bool) ([]btcpay.StorePaymentMethod, error)
}

// Service runs discovery.
type Service struct {
	Processor        Methods
	Assets           *asset.Store
	LightningEnabled bool // the deployment's LIGHTNING_ENABLED
	Log              *slog.Logger
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
	for _, a := range assets {
		want := offered(a.PaymentMethod, res.Methods)
		if a.Code == asset.BTCLN && !s.LightningEnabled {
			want = false
		}
		changed, err := s.Assets.SetEnabled(ctx, a.Code, want)
		if err != nil {
			return res, fmt.Errorf("discovery: set %s: %w", a.Code, err)
		}
		if changed {
			res.Changes = append(res.Changes, Change{Asset: a.Code, Enabled: want})
			s.log().Info("asset availability changed by discovery", "asset", a.Code, "enabled", want,
				"payment_method", a.PaymentMethod)
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

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Args asks for one discovery run (periodic, and once when the worker
// starts).
type Args struct{}

// Kind is the job kind.
func (Args) Kind() string { return "processor_discovery" }

// InsertOpts keeps a failing run from retrying for long: the next period
// runs it again anyway.
func (Args) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 3} }

// Worker runs discovery.
type Worker struct {
	river.WorkerDefaults[Args]
	Service *Service
}

// Work runs one discovery.
func (w *Worker) Work(ctx context.Context, _ *river.Job[Args]) error {
	_, err := w.Service.Run(ctx)
	return err
}
