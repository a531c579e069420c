package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"svc/cmd/svc/app/apptest"
	"svc/modules/health"
	"svc/modules/reconcile"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/idempotency"
	"svc/platform/tron/tronsim"
)

// scrape is one parsed answer of the metrics listener.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, e *apptest.Env) scrape {
	t.Helper()
	require.NotEmpty(t, e.MetricsURL, "the metrics listener runs (apptest.WithMetrics)")
	resp, err := http.Get(e.MetricsURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// find returns the series of family name whose labels include want, or
// nil.
func (s scrape) find(name string, want map[string]string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
				break
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's count; 0 when
// the series does not exist (yet).
func (s scrape) value(name string, labels map[string]string) float64 {
	m := s.find(name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// require requires the series to exist and returns its value.
func (s scrape) require(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	require.NotNil(t, s.find(name, labels), "%s%v is exposed", name, labels)
	return s.value(name, labels)
}

type l = map[string]string

// TestMetricsAfterAScenario drives the service through what every family
// measures (requests, an idempotent replay and both conflicts, processor
// and TronGrid calls that succeed and fail, a deposit settled, a job run, a
// reconciliation, events left pending and one dead, a stopped worker) and
// checks each family's values on the metrics listener against what
// happened: counters by exactly what the scenario did, gauges against the
// database.
func TestMetricsAfterAScenario(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	sim := btcpaysim.Start(t, btcpaysim.Options{Now: fake.Now, TickEvery: -1})
	node := tronsim.Start(t)
	e := apptest.New(t, apptest.WithClock(fake), apptest.WithWorker(), apptest.WithMetrics(), apptest.WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), sim.APIKey(), sim.StoreID(), "s"
		c.Tron.URL = node.URL
		c.Deposits.USDTPool = sim.TronPool()
	}))
	// The first scrape starts the ledger's count.
	before := scrapeMetrics(t, e)

	// Requests, by route template.
	for range 2 {
		require.Equal(t, http.StatusOK, e.Get("/v1/assets").Status)
	}
	require.Equal(t, http.StatusNotFound, e.Get("/v1/nothing-here").Status)

	// A deposit, its replay and both kinds of conflict.
	body, err := json.Marshal(map[string]any{"external_user_id": "alice", "asset": "BTC", "expected_amount": "100000"})
	require.NoError(t, err)
	created := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: body, Idem: "metrics-1"})
	require.Equal(t, http.StatusCreated, created.Status, string(created.Body))
	replay := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: body, Idem: "metrics-1"})
	require.Equal(t, http.StatusCreated, replay.Status)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	other := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: `{"external_user_id":"bob","asset":"BTC"}`, Idem: "metrics-1"})
	require.Equal(t, http.StatusUnprocessableEntity, other.Status)
	held, _, err := e.App.Idem.Begin(ctx, "metrics-2", "POST", "/v1/deposits", idempotency.Hash("POST", "/v1/deposits", body))
	require.NoError(t, err)
	busy := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: body, Idem: "metrics-2"})
	require.Equal(t, http.StatusConflict, busy.Status)
	require.NoError(t, held.Release(ctx))

	// The deposit is paid, confirmed and credited: one ledger entry.
	depositID := created.Map(t)["deposit_id"].(string)
	inv, ok := sim.InvoiceByOrderID(depositID)
	require.True(t, ok)
	paid, err := sim.Pay(inv.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	require.NoError(t, sim.ConfirmPayment(inv.ID, paid[0].ID))
	require.NoError(t, e.App.Deposits.Reconcile(ctx, uuid.MustParse(depositID)))
	for range 3 {
		r := e.Get("/v1/deposits/" + depositID)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, "settled", r.Map(t)["status"])
	}

	// Processor and TronGrid calls, answered and not.
	_, err = e.App.BTCPay.ServerInfo(ctx)
	require.NoError(t, err)
	sim.GoDown(btcpaysim.DownError)
	_, err = e.App.BTCPay.ServerInfo(ctx)
	require.Error(t, err)
	sim.Up()
	addr, err := chain.ParseTronAddress(sim.TronPool()[0])
	require.NoError(t, err)
	_, err = e.App.Tron.TRXBalance(ctx, addr)
	require.NoError(t, err)
	node.SetMode(tronsim.Errors)
	_, err = e.App.Tron.TRXBalance(ctx, addr)
	require.Error(t, err)
	node.SetMode(tronsim.Up)

	// A job run: one reconciliation after the one the worker runs at its
	// start (single-flight: waiting for that one keeps this one from being
	// skipped beside it).
	done := l{"kind": "reconciliation", "outcome": "completed"}
	apptest.Eventually(t, 20*time.Second, func() bool { return scrapeMetrics(t, e).value("svc_job_duration_seconds", done) >= 1 },
		"the worker's start-up reconciliation")
	jobsBefore := scrapeMetrics(t, e)
	_, err = e.Worker.Insert(ctx, reconcile.RunArgs{}, nil)
	require.NoError(t, err)
	apptest.Eventually(t, 20*time.Second, func() bool {
		return scrapeMetrics(t, e).value("svc_job_duration_seconds", done) == jobsBefore.value("svc_job_duration_seconds", done)+1
	}, "the inserted reconciliation")

	// Events: the deposit's are pending (no PLATFORM_WEBHOOK_URL); one is
	// made dead. The worker stops, so its heartbeat ages with the clock.
	_, err = e.App.DB.Bun.ExecContext(ctx, `UPDATE outbound_events SET status = 'dead', dead_at = now(), attempts = 10
	 WHERE id = (SELECT id FROM outbound_events ORDER BY created_at, id LIMIT 1)`)
	require.NoError(t, err)
	e.StopWorker()
	fake.Advance(90 * time.Second)

	after := scrapeMetrics(t, e)
	delta := func(name string, labels l) float64 { return after.value(name, labels) - before.value(name, labels) }

	t.Run("HTTP", func(t *testing.T) {
		const h = "svc_http_request_duration_seconds"
		require.Equal(t, 2.0, delta(h, l{"method": "GET", "route": "/v1/assets", "status": "200"}))
		require.Equal(t, 3.0, delta(h, l{"method": "GET", "route": "/v1/deposits/:deposit_id", "status": "200"}), "by template, not by id")
		require.Equal(t, 1.0, delta(h, l{"method": "GET", "route": "unmatched", "status": "404"}))
		require.Equal(t, 2.0, delta(h, l{"method": "POST", "route": "/v1/deposits", "status": "201"}), "the creation and its replay")
		require.Equal(t, 1.0, delta(h, l{"method": "POST", "route": "/v1/deposits", "status": "422"}))
		require.Equal(t, 1.0, delta(h, l{"method": "POST", "route": "/v1/deposits", "status": "409"}))
		for _, m := range after[h].GetMetric() {
			for _, lp := range m.GetLabel() {
				require.NotContains(t, lp.GetValue(), depositID, "no raw path in a label")
			}
		}
	})
	t.Run("Idempotency", func(t *testing.T) {
		require.Equal(t, 1.0, delta("svc_idempotency_replays_total", nil))
		require.Equal(t, 1.0, delta("svc_idempotency_conflicts_total", l{"reason": "mismatch"}))
		require.Equal(t, 1.0, delta("svc_idempotency_conflicts_total", l{"reason": "in_flight"}))
	})
	t.Run("Upstreams", func(t *testing.T) {
		const u = "svc_upstream_request_duration_seconds"
		require.Equal(t, 1.0, delta(u, l{"upstream": "btcpay", "operation": "create_invoice", "outcome": "ok"}), "the replay did not call the processor")
		require.Equal(t, 1.0, delta(u, l{"upstream": "btcpay", "operation": "server_info", "outcome": "ok"}))
		require.Equal(t, 1.0, delta(u, l{"upstream": "btcpay", "operation": "server_info", "outcome": "unreachable"}))
		require.Equal(t, 1.0, delta(u, l{"upstream": "trongrid", "operation": "getaccount", "outcome": "ok"}))
		require.Equal(t, 1.0, delta(u, l{"upstream": "trongrid", "operation": "getaccount", "outcome": "unreachable"}))
		for _, m := range after[u].GetMetric() {
			for _, lp := range m.GetLabel() {
				require.NotContains(t, lp.GetValue(), sim.APIKey())
				require.NotContains(t, lp.GetValue(), "http")
			}
		}
	})
	t.Run("Jobs", func(t *testing.T) {
		ran := after.value("svc_job_duration_seconds", done)
		require.Equal(t, jobsBefore.value("svc_job_duration_seconds", done)+1, ran, "exactly the inserted run since")
		require.Equal(t, ran, after.require(t, "svc_job_queue_wait_seconds", l{"kind": "reconciliation"}), "a wait per run")
		require.Positive(t, after.value("svc_job_duration_seconds", l{"kind": "worker_heartbeat", "outcome": "completed"}))
	})
	t.Run("Ledger", func(t *testing.T) {
		require.Equal(t, 1.0, after.require(t, "svc_ledger_entries_total", l{"kind": "deposit_credit"}), "the one credit since the first scrape")
		require.Equal(t, 0.0, after.require(t, "svc_ledger_entries_total", l{"kind": "withdrawal_hold"}), "every kind is exposed from 0")
	})
	t.Run("Events", func(t *testing.T) {
		var pending, dead int
		var oldest time.Time
		require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead'),
		  min(created_at) FILTER (WHERE status = 'pending') FROM outbound_events`).Scan(ctx, &pending, &dead, &oldest))
		require.Positive(t, pending, "the deposit's events wait for a webhook URL")
		require.Equal(t, 1, dead)
		require.Equal(t, float64(pending), after.require(t, "svc_events_pending", nil))
		require.Equal(t, 1.0, after.require(t, "svc_events_dead", nil))
		require.InDelta(t, fake.Now().Sub(oldest).Seconds(), after.require(t, "svc_events_oldest_pending_age_seconds", nil), 1e-6)
		require.GreaterOrEqual(t, after.value("svc_events_oldest_pending_age_seconds", nil), 90.0)
	})
	t.Run("Reconciliation", func(t *testing.T) {
		h, err := e.App.Reconcile.History(ctx, 1)
		require.NoError(t, err)
		require.Len(t, h, 1)
		latest := h[0]
		require.Equal(t, map[bool]float64{true: 1, false: 0}[latest.Healthy], after.require(t, "svc_reconciliation_healthy", nil))
		require.InDelta(t, float64(latest.CreatedAt.UnixNano())/1e9, after.require(t, "svc_reconciliation_last_report_timestamp_seconds", nil), 1e-3)
		require.NotEmpty(t, latest.Report.Custody)
		for _, line := range latest.Report.Custody {
			a := l{"asset": line.Asset}
			require.Equal(t, map[bool]float64{true: 1, false: 0}[line.Insolvent], after.require(t, "svc_reconciliation_asset_insolvent", a), line.Asset)
			require.Equal(t, map[bool]float64{true: 1, false: 0}[line.ChainBalance != nil], after.require(t, "svc_reconciliation_asset_balance_read", a), line.Asset)
		}
	})
	t.Run("WorkerHeartbeat", func(t *testing.T) {
		last, err := health.LastBeat(ctx, e.App.DB.Bun)
		require.NoError(t, err)
		require.NotNil(t, last)
		age := after.require(t, "svc_worker_heartbeat_age_seconds", nil)
		require.InDelta(t, fake.Now().Sub(*last).Seconds(), age, 1e-6)
		require.GreaterOrEqual(t, age, 90.0, "no beat since the worker stopped")
	})
	t.Run("Pool", func(t *testing.T) {
		require.Equal(t, float64(e.App.Cfg.Database.MaxConns), after.require(t, "svc_db_pool_max_connections", nil))
		require.Greater(t, after.value("svc_db_pool_acquires_total", nil), before.value("svc_db_pool_acquires_total", nil))
		require.NotNil(t, after.find("svc_db_pool_empty_acquire_wait_seconds_total", nil))
	})
	t.Run("Probes", func(t *testing.T) {
		for _, p := range []string{"events", "webhook_deliveries", "ledger_entries", "reconciliation", "worker_heartbeat"} {
			require.Equal(t, 1.0, after.require(t, "svc_state_up", l{"probe": p}), p)
		}
	})
	t.Run("DashboardAndAlertsUseExposedFamilies", func(t *testing.T) {
		requireKnownMetrics(t, after)
	})
}

// TestPprofOnlyOnTheMetricsListener: profiles and /metrics are served on
// METRICS_ADDR and nowhere on the API's port; without METRICS_ADDR there is
// no such listener.
func TestPprofOnlyOnTheMetricsListener(t *testing.T) {
	t.Parallel()
	e := apptest.New(t, apptest.WithMetrics())
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := get(e.MetricsURL + "/debug/pprof/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "goroutine")
	status, body = get(e.MetricsURL + "/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "goroutine profile")
	status, _ = get(e.MetricsURL + "/debug/pprof/cmdline")
	require.Equal(t, http.StatusOK, status)
	status, body = get(e.MetricsURL + "/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "svc_build_info")
	for _, path := range []string{"/", "/v1/assets", "/healthz"} {
		status, _ = get(e.MetricsURL + path)
		require.Equal(t, http.StatusNotFound, status, "the metrics listener serves %s", path)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/metrics"} {
		status, _ = get(e.URL + path)
		require.Equal(t, http.StatusNotFound, status, "the API serves %s", path)
	}

	off := apptest.New(t)
	require.Empty(t, off.MetricsURL, "METRICS_ADDR is empty by default: no listener")
}

var metricName = regexp.MustCompile(`\bsvc_[a-z0-9_]+`)

// requireKnownMetrics checks that every metric name docs/alerts.yml and
// docs/grafana-dashboard.json use is exposed (s: a scrape after a scenario
// that exercises every family), that the alerts are the operator's five,
// and that docs/operations.md describes every family.
func requireKnownMetrics(t *testing.T, s scrape) {
	t.Helper()
	known := map[string]bool{}
	for name, f := range s {
		known[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			known[name+"_bucket"], known[name+"_count"], known[name+"_sum"] = true, true, true
		}
	}
	check := func(file, expr string) {
		t.Helper()
		names := metricName.FindAllString(expr, -1)
		require.NotEmpty(t, names, "%s: %q uses no svc_ metric", file, expr)
		for _, n := range names {
			require.True(t, known[n], "%s: %s is not a metric the service exposes (in %q)", file, n, expr)
		}
	}

	raw, err := os.ReadFile("../../../docs/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	var alerts []string
	for _, g := range rules.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			require.NotEmpty(t, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.NotEmpty(t, r.Annotations["runbook"], r.Alert)
			_, err := model.ParseDuration(r.For)
			require.NoError(t, err, "%s: for %q", r.Alert, r.For)
			check("alerts.yml", r.Expr)
		}
	}
	require.ElementsMatch(t, []string{"SvcDeadEvents", "SvcDeadWebhookDeliveries", "SvcWorkerStale", "SvcProcessorDown", "SvcReconciliationUnhealthy", "SvcDatabasePoolExhausted"}, alerts)

	raw, err = os.ReadFile("../../../docs/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		for _, tg := range p.Targets {
			check("grafana-dashboard.json", tg.Expr)
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
			}
		}
	}
	ops, err := os.ReadFile("../../../docs/operations.md")
	require.NoError(t, err)
	for name := range s {
		if !strings.HasPrefix(name, "svc_") {
			continue
		}
		require.Contains(t, string(ops), "`"+name+"`", "docs/operations.md describes %s", name)
		require.True(t, used[name], "the dashboard shows %s", name)
	}
}
