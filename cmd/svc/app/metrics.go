package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"svc/modules/health"
	"svc/modules/ledger"
	"svc/platform/idempotency"
	"svc/platform/metrics"
	"svc/platform/queue"
)

// metricsArea holds the process's Prometheus registry (docs/operations.md
// lists every family). It is initialised first: the other areas hand its
// observers to what they build (the HTTP frame, the idempotency store, the
// processor and TRON clients, the worker). Its listener, on METRICS_ADDR,
// is started by ServeMetrics.
type metricsArea struct {
	Metrics *metrics.Metrics
}

func (a *App) initMetrics(context.Context) error {
	a.Metrics = metrics.New(metrics.Options{Version: Version})
	a.Metrics.RegisterPool(a.DB.Pool)
	// The ledger is append-only and large: its entries are counted from the
	// rows added since the previous scrape, never with a count(*) over the
	// table (metrics.RowCounter).
	kinds := make([]string, 0, len(ledger.EntryKinds()))
	for _, k := range ledger.EntryKinds() {
		kinds = append(kinds, string(k))
	}
	entries := &metrics.RowCounter{DB: a.DB.SQL, Table: "ledger_entries", Label: "kind", Labels: kinds}
	// The closures read the areas initialised after this one, at scrape
	// time.
	a.Metrics.RegisterState(metrics.State{
		Now: a.Clock.Now, Log: a.Log,
		Events: func(ctx context.Context) (metrics.EventBacklog, error) {
			b, err := a.Events.Backlog(ctx)
			return metrics.EventBacklog(b), err
		},
		WebhookDeliveries: func(ctx context.Context) (metrics.DeliveryBacklog, error) {
			b, err := a.Events.EndpointBacklog(ctx)
			return metrics.DeliveryBacklog(b), err
		},
		LedgerEntries:  entries.Count,
		Reconciliation: a.latestReconciliation,
		Heartbeat:      func(ctx context.Context) (*time.Time, error) { return health.LastBeat(ctx, a.DB.Bun) },
	})
	return nil
}

// latestReconciliation is the latest stored report, per asset.
func (a *App) latestReconciliation(ctx context.Context) (*metrics.Reconciliation, error) {
	h, err := a.Reconcile.History(ctx, 1)
	if err != nil || len(h) == 0 {
		return nil, err
	}
	r := &metrics.Reconciliation{At: h[0].CreatedAt, Healthy: h[0].Healthy}
	for _, line := range h[0].Report.Custody {
		ar := metrics.AssetReconciliation{Asset: line.Asset, Insolvent: line.Insolvent}
		if line.Difference != nil {
			// A display value for a dashboard, never used for money.
			if d, err := strconv.ParseFloat(*line.Difference, 64); err == nil {
				ar.Difference = &d
			}
		}
		r.Assets = append(r.Assets, ar)
	}
	return r, nil
}

// observeIdempotency counts the idempotency middleware's replays and
// refusals.
func (a *App) observeIdempotency(o idempotency.Outcome) { a.Metrics.ObserveIdempotency(string(o)) }

// observeJob records a River job's run.
func (a *App) observeJob(r queue.JobRun) { a.Metrics.ObserveJob(r.Kind, r.Outcome, r.Ran, r.Waited) }

// observeUpstream returns the observer of one outbound client's calls.
func (a *App) observeUpstream(upstream string) func(op, outcome string, took time.Duration) {
	return func(op, outcome string, took time.Duration) { a.Metrics.ObserveUpstream(upstream, op, outcome, took) }
}

// ServeMetrics starts the metrics listener on METRICS_ADDR: /metrics and
// /debug/pprof/, nothing else, and never on the API's listener. It returns
// the address it listens on ("" when METRICS_ADDR is empty: off) and stop,
// which closes it.
func (a *App) ServeMetrics() (addr string, stop func(), err error) {
	if a.Cfg.Metrics.Addr == "" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", a.Cfg.Metrics.Addr)
	if err != nil {
		return "", nil, fmt.Errorf("METRICS_ADDR %s: %w", a.Cfg.Metrics.Addr, err)
	}
	srv := metrics.NewServer(a.Metrics.Handler())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.Log.Error("metrics listener stopped", "error", err)
		}
	}()
	a.Log.Info("metrics listening", "address", ln.Addr().String())
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
