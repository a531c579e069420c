// Package app assembles the service's processes from a Config: it opens the
// database, builds every module with its dependencies, registers the HTTP
// routes and the River workers. cmd/svc's commands and the end-to-end tests
// both start the service through it, so what is tested is what runs.
//
// Each business area keeps its wiring in its own file (ledger.go, event.go,
// processor.go, audit.go, deposit.go): an embedded struct with its fields and the
// init, routes and jobs methods that New, HTTP and Worker call. metrics.go
// holds the Prometheus registry the others report to, and its listener;
// replica.go the read replica that svc api opens (UseReplica) for the
// reads where staleness is harmless.
package app

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"svc/jobs"
	"svc/modules/apikey"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/httpapi"
	"svc/platform/queue"
	"svc/platform/tracing"
)

// Version is the build's version, set by cmd/svc from -ldflags.
var Version = "dev"

// Options are what tests may replace.
type Options struct {
	Clock clock.Clock
	// Tracing makes the spans (tracing.FromEnv); nil is off.
	Tracing *tracing.Tracing
	// Spec is the OpenAPI document requests are checked against; nil is
	// the committed one (openapi.Spec).
	Spec []byte
}

// App is one assembled process.
type App struct {
	Cfg      config.Config
	Log      *slog.Logger
	DB       *db.DB
	Clock    clock.Clock
	Inserter *river.Client[*sql.Tx]
	Keys     *apikey.Store
	// Tracing is never nil; off, it installs nothing (tracing.FromEnv).
	Tracing  *tracing.Tracing
	recovery []river.JobArgs
	spec     []byte // Options.Spec

	metricsArea
	foundation
	ledgerArea
	eventArea
	processorArea
	auditArea
	depositArea
	withdrawalArea
	transferArea
	holdArea
	reconcileArea
	replicaArea
	sandboxArea
}

// New connects to the database and builds every module. It does not start
// anything.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, o Options) (*App, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Tracing == nil {
		o.Tracing = &tracing.Tracing{}
	}
	tp := o.Tracing.Provider
	d, err := db.Open(ctx, cfg.Database.URL, cfg.Database.MaxConns, db.WithTracer(tp))
	if err != nil {
		return nil, err
	}
	ins, err := queue.NewInserter(d.SQL, log, queue.TraceMiddleware(tp)...)
	if err != nil {
		d.Close()
		return nil, err
	}
	proxies, err := httpapi.ParseProxies(cfg.HTTP.TrustedProxies, cfg.HTTP.ProxyHeader)
	if err != nil {
		d.Close()
		return nil, err
	}
	a := &App{Cfg: cfg, Log: log, DB: d, Clock: o.Clock, Inserter: ins, Tracing: o.Tracing, spec: o.Spec,
		Keys: &apikey.Store{DB: d.Bun, Prefix: cfg.APIKeys.Prefix, Mode: cfg.APIKeys.Mode, Now: o.Clock.Now, CacheTTL: cfg.APIKeys.CacheTTL, Proxies: proxies}}
	for _, step := range []struct {
		name string
		init func(context.Context) error
	}{
		{"metrics", a.initMetrics},
		{"audit", a.initAudit},
		{"foundation", a.initFoundation},
		{"ledger", a.initLedger},
		{"events", a.initEvents},
		{"processor", a.initProcessor},
		{"deposits", a.initDeposits},
		{"withdrawals", a.initWithdrawals},
		{"transfers", a.initTransfers},
		{"holds", a.initHolds},
		{"reconciliation", a.initReconcile},
		{"operators", a.initOperators},
		{"sandbox", a.initSandbox},
	} {
		if err := step.init(ctx); err != nil {
			d.Close()
			return nil, fmt.Errorf("init %s: %w", step.name, err)
		}
	}
	return a, nil
}

// Close wakes the work on the events and processor webhooks committed
// last, releases the database and sends the spans not yet exported.
func (a *App) Close() {
	if a.Events != nil && a.Events.Waker != nil {
		a.Events.Waker.Close() // wakes the deliveries of what committed last
	}
	if a.Ingress != nil && a.Ingress.Waker != nil {
		a.Ingress.Waker.Close()
	}
	a.closeReplica()
	a.DB.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Tracing.Shutdown(ctx); err != nil {
		a.Log.Warn("traces not all exported at exit", "error", err)
	}
}

// Routers are the groups a module registers its routes on. Mutating /v1
// routes must put Idem before their handler. Checked makes a group whose
// routes' requests are checked against openapi.json (httpapi.Validator).
type Routers struct {
	Public   fiber.Router // no API key: health, docs, ingress
	Platform fiber.Router // /v1, readwrite (admin satisfies it; read_only its GETs)
	Admin    fiber.Router // /v1/admin, admin only
	Idem     fiber.Handler
	// ClaimIn wraps a handler that claims its Idempotency-Key in its own
	// first statement (idempotency.Store.ClaimInHandler).
	ClaimIn func(fiber.Handler) fiber.Handler
	Checked func(fiber.Router) fiber.Router
}

// HTTP returns the API's fiber app with every route registered.
func (a *App) HTTP() *fiber.App {
	app := httpapi.New(httpapi.Options{BodyLimit: a.Cfg.HTTP.BodyLimitBytes, Log: a.Log, Observe: a.Metrics.ObserveHTTP,
		Tracer: a.Tracing.Provider, InterfaceVersion: a.InterfaceVersion})
	r := Routers{Public: app}
	a.routesPublic(r) // health and docs first: they need no key
	a.routesProcessorPublic(r)
	r.Platform = app.Group("/v1", a.Keys.Require(apikey.ScopeReadWrite))
	r.Admin = app.Group("/v1/admin", a.Keys.Require(apikey.ScopeAdmin))
	r.Idem = a.idempotencyMiddleware()
	r.ClaimIn = func(h fiber.Handler) fiber.Handler { return a.Idem.ClaimInHandler(a.Log, h) }
	r.Checked = a.Requests.Router
	a.routesFoundation(r)
	a.routesLedger(r)
	a.routesEvents(r)
	a.routesProcessor(r)
	a.routesAudit(r)
	a.routesDeposits(r)
	a.routesWithdrawals(r)
	a.routesTransfers(r)
	a.routesHolds(r)
	a.routesReconcile(r)
	a.routesOperators(r)
	a.routesSandbox(r)
	httpapi.NotFound(app)
	return app
}

// Listen opens the API's listener on addr for srv, bounded and kept
// serving through accept errors (httpapi.Listener, HTTP_MAX_CONNECTIONS).
func (a *App) Listen(srv *fiber.App, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := httpapi.Listener(ln, a.Cfg.HTTP.MaxConnections, a.Log)
	srv.Server().ConnState = l.ConnState
	return l, nil
}

// Jobs collects the workers and periodic jobs of every area.
type Jobs struct {
	Workers  *river.Workers
	Periodic []*river.PeriodicJob
	// SingleFlight are the kinds of which one job at a time runs across
	// every worker (queue.WorkerParams.SingleFlight).
	SingleFlight []string
	// Recovery are the passes to run at once when the database is back
	// after an outage (RecoveryJobs).
	Recovery []river.JobArgs
}

// AddPeriodic schedules args every interval (jobs.Periodic) and makes its
// kind single-flight: a periodic pass is a sweep over whatever is due, so a
// second one beside it does nothing useful, and passes slower than their
// interval must not pile up and take every worker slot from webhooks and
// deliveries (the fault harness saw that after an outage).
func (j *Jobs) AddPeriodic(every time.Duration, args river.JobArgs) {
	j.Periodic = append(j.Periodic, jobs.Periodic(every, args))
	j.SingleFlight = append(j.SingleFlight, args.Kind())
}

// RecoveryJobs are the passes a worker runs at once when the database is
// back after an outage (known once Worker has been called): the deposit
// poll, so that deposits paid meanwhile, whose processor webhooks were
// refused, settle within seconds; the payout pass; the event sweep.
func (a *App) RecoveryJobs() []river.JobArgs { return a.recovery }

// Worker returns the River client that runs every job (not yet started).
func (a *App) Worker(p queue.WorkerParams) (*river.Client[pgx.Tx], error) {
	j := &Jobs{Workers: river.NewWorkers()}
	for _, add := range []func(*Jobs) error{a.jobsFoundation, a.jobsLedger, a.jobsEvents, a.jobsProcessor, a.jobsAudit, a.jobsDeposits, a.jobsWithdrawals, a.jobsHolds, a.jobsReconcile} {
		if err := add(j); err != nil {
			return nil, err
		}
	}
	p.Workers, p.PeriodicJobs, p.SingleFlight, p.Log = j.Workers, j.Periodic, j.SingleFlight, a.Log
	if p.Observe == nil {
		p.Observe = a.observeJob
	}
	if p.Middleware == nil {
		p.Middleware = queue.TraceMiddleware(a.Tracing.Provider)
	}
	a.recovery = j.Recovery
	if p.Concurrency == 0 {
		p.Concurrency = a.Cfg.Worker.Concurrency
	}
	return queue.NewWorker(a.DB.Pool, p)
}
