// Package metrics owns the process's Prometheus metrics: one registry per
// process (no global), the families the service exposes, the observers the
// HTTP frame, the idempotency middleware, the job queue and the outbound
// clients call, and the listener that serves /metrics and net/http/pprof
// apart from the public API (METRICS_ADDR).
//
// Instrumentation stays out of the code it measures: every instrumented
// package exposes a plain hook (a func field or option) and knows nothing
// of Prometheus; the app wires the hooks to the observers here. State that
// lives in the database (outbound events, ledger entries, the latest
// reconciliation, the worker heartbeat) is read when the metrics are
// scraped, one cheap query per probe under a short timeout (State), never
// on the request path.
//
// Every family and label is listed in docs/operations.md. No label carries
// a path with an id in it, a key, a URL or an upstream's error text: routes
// are fiber's templates, operations the clients' fixed names.
package metrics

import (
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every family of the service.
const Namespace = "svc"

// describer returns what describes the families of a collector's
// subsystem (none: svc_NAME): a name, its help and its variable labels.
func describer(subsystem string) func(name, help string, labels ...string) *prometheus.Desc {
	return func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, labels, nil)
	}
}

// Metrics is one process's registry and the families it observes into.
type Metrics struct {
	Registry *prometheus.Registry

	httpDuration  *prometheus.HistogramVec
	idemReplays   prometheus.Counter
	idemConflicts *prometheus.CounterVec
	jobDuration   *prometheus.HistogramVec
	jobWait       *prometheus.HistogramVec
	upstream      *prometheus.HistogramVec
}

// Options configures New.
type Options struct {
	// Version is reported by svc_build_info.
	Version string
}

// New returns a registry with the service's families, Go's runtime and the
// process's own metrics registered.
func New(o Options) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
		Help:    "Time to answer an API request, by method, route template (fiber's, never the raw path) and status.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"method", "route", "status"})
	m.idemReplays = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "idempotency", Name: "replays_total",
		Help: "Requests answered with a stored response (same Idempotency-Key, same request).",
	})
	m.idemConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "idempotency", Name: "conflicts_total",
		Help: "Requests refused on their Idempotency-Key: mismatch (422, the key was used with another request), in_flight (409, its first attempt still runs).",
	}, []string{"reason"})
	m.jobDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "job", Name: "duration_seconds",
		Help:    "Time a River job ran, by kind and outcome (completed, failed, discarded, cancelled, snoozed, skipped).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"kind", "outcome"})
	m.jobWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "job", Name: "queue_wait_seconds",
		Help:    "Time from when a River job was due to when a worker started it, by kind.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
	}, []string{"kind"})
	m.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "upstream", Name: "request_duration_seconds",
		Help:    "Calls to the payment processor (upstream btcpay) and the TRON node (trongrid), by operation and outcome (ok, not_found, refused, unreachable, error).",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30},
	}, []string{"upstream", "operation", "outcome"})
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info", Help: "Always 1; the build's version is its label.",
		ConstLabels: prometheus.Labels{"version": o.Version},
	})
	build.Set(1)
	for _, reason := range []string{IdempotencyMismatch, IdempotencyInFlight} {
		m.idemConflicts.WithLabelValues(reason) // from 0: a rate over a series that appears at 1 misses it
	}
	m.Registry.MustRegister(m.httpDuration, m.idemReplays, m.idemConflicts, m.jobDuration, m.jobWait, m.upstream, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves /metrics and net/http/pprof's /debug/pprof/ and nothing
// else. It is for the metrics listener alone: profiles and the command line
// must never be reachable on the public API port. (Importing net/http/pprof
// also registers it on http.DefaultServeMux, which no listener of the
// service serves.)
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{
		// A collector's error leaves its metric out; the rest is served.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also the named profiles: heap, goroutine, allocs, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// NewServer returns the metrics listener's server for h. Its write timeout
// leaves room for a CPU profile or a trace of up to a minute.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// methods are the HTTP methods kept as a label value; any other is OTHER.
var methods = map[string]string{"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH", "DELETE": "DELETE", "OPTIONS": "OPTIONS"}

// ObserveHTTP records one answered request. route must be a template
// ("/v1/deposits/:deposit_id"), never a raw path.
func (m *Metrics) ObserveHTTP(method, route string, status int, took time.Duration) {
	canonical, ok := methods[method]
	if !ok {
		canonical = "OTHER"
	}
	m.httpDuration.WithLabelValues(canonical, route, strconv.Itoa(status)).Observe(took.Seconds())
}

// The idempotency outcomes ObserveIdempotency counts.
const (
	IdempotencyReplayed = "replayed"
	IdempotencyMismatch = "mismatch"
	IdempotencyInFlight = "in_flight"
)

// ObserveIdempotency counts a replay or a conflict.
func (m *Metrics) ObserveIdempotency(outcome string) {
	switch outcome {
	case IdempotencyReplayed:
		m.idemReplays.Inc()
	case IdempotencyMismatch, IdempotencyInFlight:
		m.idemConflicts.WithLabelValues(outcome).Inc()
	}
}

// ObserveJob records one run of a River job: how long it ran, and how long
// it waited after it was due (wait < 0: unknown, not recorded).
func (m *Metrics) ObserveJob(kind, outcome string, ran, wait time.Duration) {
	m.jobDuration.WithLabelValues(kind, outcome).Observe(ran.Seconds())
	if wait >= 0 {
		m.jobWait.WithLabelValues(kind).Observe(wait.Seconds())
	}
}

// The upstreams ObserveUpstream labels.
const (
	UpstreamBTCPay   = "btcpay"
	UpstreamTronGrid = "trongrid"
)

// ObserveUpstream records one call to an outside service. op is the
// client's fixed name of the call ("create invoice" becomes
// create_invoice), never anything taken from a request.
func (m *Metrics) ObserveUpstream(upstream, op, outcome string, took time.Duration) {
	m.upstream.WithLabelValues(upstream, strings.ReplaceAll(op, " ", "_"), outcome).Observe(took.Seconds())
}
