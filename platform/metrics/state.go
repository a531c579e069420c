package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"svc/platform/logging"
)

// DefaultStateTimeout bounds each probe of State.
const DefaultStateTimeout = 2 * time.Second

// EventBacklog is the outbound events not delivered.
type EventBacklog struct {
	Pending, Dead int64
	// OldestPending is the creation time of the oldest pending event (nil
	// when none is pending).
	OldestPending *time.Time
}

// DeliveryBacklog is the events' deliveries to webhook endpoints not made.
type DeliveryBacklog struct {
	Pending, Dead int64
}

// Reconciliation is the latest stored reconciliation report.
type Reconciliation struct {
	At      time.Time
	Healthy bool
	Assets  []AssetReconciliation
}

// AssetReconciliation is one asset's line of a report.
type AssetReconciliation struct {
	Asset     string
	Insolvent bool
	// Difference is chain balance minus ledger custody in the asset's
	// display unit (BTC, USDT), for dashboards only; nil when the chain
	// balance could not be read.
	Difference *float64
}

// State reads what lives in the database when the metrics are scraped: the
// probes run in parallel, each under Timeout, and a probe that fails or
// times out is reported by svc_state_up{probe} = 0 and leaves its own
// families out of that scrape. A nil probe is not run. Several processes
// report the same database: aggregate these families with max, not sum.
type State struct {
	Events            func(ctx context.Context) (EventBacklog, error)
	WebhookDeliveries func(ctx context.Context) (DeliveryBacklog, error)
	LedgerEntries     func(ctx context.Context) (map[string]int64, error) // cumulative, by kind
	Reconciliation    func(ctx context.Context) (*Reconciliation, error)  // nil: no report yet
	Heartbeat         func(ctx context.Context) (*time.Time, error)       // nil: no heartbeat yet
	Now               func() time.Time
	Timeout           time.Duration
	Log               *slog.Logger
}

// Probe names (svc_state_up's probe label).
const (
	ProbeEvents         = "events"
	ProbeDeliveries     = "webhook_deliveries"
	ProbeLedger         = "ledger_entries"
	ProbeReconciliation = "reconciliation"
	ProbeHeartbeat      = "worker_heartbeat"
)

type stateCollector struct {
	s State

	up, took                                 *prometheus.Desc
	pending, dead, oldest                    *prometheus.Desc
	epPending, epDead                        *prometheus.Desc
	entries                                  *prometheus.Desc
	recHealthy, recAt, recInsolvent, recDiff *prometheus.Desc
	recRead                                  *prometheus.Desc
	heartbeat                                *prometheus.Desc
}

// RegisterState adds the scrape-time probes of s.
func (m *Metrics) RegisterState(s State) {
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultStateTimeout
	}
	s.Log = logging.Or(s.Log)
	d := describer("")
	m.Registry.MustRegister(&stateCollector{
		s:            s,
		up:           d("state_up", "1 when the probe's query answered within its timeout at this scrape, else 0.", "probe"),
		took:         d("state_probe_duration_seconds", "Time the probe's query took at this scrape.", "probe"),
		pending:      d("events_pending", "Outbound events not yet delivered (waiting for their next attempt, or for PLATFORM_WEBHOOK_URL)."),
		dead:         d("events_dead", "Outbound events that failed ten attempts and wait for an operator's redelivery."),
		oldest:       d("events_oldest_pending_age_seconds", "Age of the oldest pending outbound event (0 when none is pending)."),
		epPending:    d("webhook_deliveries_pending", "Events' deliveries to webhook endpoints not yet delivered (waiting for their next attempt, or for their endpoint to be enabled)."),
		epDead:       d("webhook_deliveries_dead", "Events' deliveries to webhook endpoints that failed ten attempts and wait for an operator's redelivery."),
		entries:      d("ledger_entries_total", "Ledger entries committed since this process's first scrape, by kind.", "kind"),
		recHealthy:   d("reconciliation_healthy", "1 when the latest reconciliation report is healthy, else 0 (absent before the first report)."),
		recAt:        d("reconciliation_last_report_timestamp_seconds", "When the latest reconciliation report was made (unix seconds)."),
		recInsolvent: d("reconciliation_asset_insolvent", "1 when the latest report finds the asset insolvent (custody below what users are owed).", "asset"),
		recRead:      d("reconciliation_asset_balance_read", "1 when the latest report could read the asset's chain balance, else 0.", "asset"),
		recDiff:      d("reconciliation_asset_difference", "Chain balance minus ledger custody in the latest report, in the asset's display unit (absent when the balance could not be read).", "asset"),
		heartbeat:    d("worker_heartbeat_age_seconds", "Age of the most recent worker heartbeat (absent before the first one)."),
	})
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.took, c.pending, c.dead, c.oldest, c.epPending, c.epDead, c.entries, c.recHealthy, c.recAt,
		c.recInsolvent, c.recRead, c.recDiff, c.heartbeat} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	probes := []struct {
		name string
		on   bool
		run  func(ctx context.Context, out func(prometheus.Metric)) error
	}{
		{ProbeEvents, c.s.Events != nil, c.events},
		{ProbeDeliveries, c.s.WebhookDeliveries != nil, c.deliveries},
		{ProbeLedger, c.s.LedgerEntries != nil, c.ledger},
		{ProbeReconciliation, c.s.Reconciliation != nil, c.reconciliation},
		{ProbeHeartbeat, c.s.Heartbeat != nil, c.heartbeatAge},
	}
	var wg sync.WaitGroup
	for _, p := range probes {
		if !p.on {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.s.Timeout)
			defer cancel()
			// A probe's metrics are sent only when all of it succeeded.
			var got []prometheus.Metric
			start := time.Now()
			err := p.run(ctx, func(m prometheus.Metric) { got = append(got, m) })
			ch <- prometheus.MustNewConstMetric(c.took, prometheus.GaugeValue, time.Since(start).Seconds(), p.name)
			up := 1.0
			if err != nil {
				up = 0
				c.s.Log.Warn("metrics: state probe failed", "probe", p.name, "error", err)
				got = nil
			}
			ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, p.name)
			for _, m := range got {
				ch <- m
			}
		})
	}
	wg.Wait()
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *stateCollector) events(ctx context.Context, out func(prometheus.Metric)) error {
	b, err := c.s.Events(ctx)
	if err != nil {
		return err
	}
	age := 0.0
	if b.OldestPending != nil {
		age = max(0, c.s.Now().Sub(*b.OldestPending).Seconds())
	}
	out(gauge(c.pending, float64(b.Pending)))
	out(gauge(c.dead, float64(b.Dead)))
	out(gauge(c.oldest, age))
	return nil
}

func (c *stateCollector) deliveries(ctx context.Context, out func(prometheus.Metric)) error {
	b, err := c.s.WebhookDeliveries(ctx)
	if err != nil {
		return err
	}
	out(gauge(c.epPending, float64(b.Pending)))
	out(gauge(c.epDead, float64(b.Dead)))
	return nil
}

func (c *stateCollector) ledger(ctx context.Context, out func(prometheus.Metric)) error {
	counts, err := c.s.LedgerEntries(ctx)
	if err != nil {
		return err
	}
	for kind, n := range counts {
		out(prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(n), kind))
	}
	return nil
}

func (c *stateCollector) reconciliation(ctx context.Context, out func(prometheus.Metric)) error {
	r, err := c.s.Reconciliation(ctx)
	if err != nil || r == nil {
		return err
	}
	out(gauge(c.recHealthy, flag(r.Healthy)))
	out(gauge(c.recAt, float64(r.At.UnixNano())/1e9))
	for _, a := range r.Assets {
		out(gauge(c.recInsolvent, flag(a.Insolvent), a.Asset))
		out(gauge(c.recRead, flag(a.Difference != nil), a.Asset))
		if a.Difference != nil {
			out(gauge(c.recDiff, *a.Difference, a.Asset))
		}
	}
	return nil
}

func (c *stateCollector) heartbeatAge(ctx context.Context, out func(prometheus.Metric)) error {
	last, err := c.s.Heartbeat(ctx)
	if err != nil || last == nil {
		return err
	}
	out(gauge(c.heartbeat, max(0, c.s.Now().Sub(*last).Seconds())))
	return nil
}
