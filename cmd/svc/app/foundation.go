package app

import (
	"context"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/riverqueue/river"

	"svc/jobs"
	"svc/migrations"
	"svc/modules/asset"
	"svc/modules/health"
	"svc/platform/db"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/openapi"
)

// foundation holds the pieces every area uses.
type foundation struct {
	Assets *asset.Store
	Idem   *idempotency.Store
	Health *health.Service
	// Requests checks requests against openapi.json.
	Requests *httpapi.Validator
	// InterfaceVersion is info.version of that document, sent on every
	// response (httpapi.InterfaceVersionHeader).
	InterfaceVersion string
}

// committedSpec is the validator of the committed openapi.json, parsed and
// validated once per process (about 70 ms).
var committedSpec = sync.OnceValues(func() (*httpapi.Validator, error) {
	return httpapi.NewValidator(context.Background(), openapi.Spec)
})

func (a *App) initFoundation(ctx context.Context) error {
	var err error
	if a.spec == nil {
		a.Requests, err = committedSpec()
	} else {
		a.Requests, err = httpapi.NewValidator(ctx, a.spec)
	}
	if err != nil {
		return err
	}
	spec := a.spec
	if spec == nil {
		spec = openapi.Spec
	}
	if a.InterfaceVersion, err = openapi.VersionOf(spec); err != nil {
		return err
	}
	// Changing limits and minting or revoking keys are signed by admins.
	a.Assets = &asset.Store{DB: a.DB.Bun, Now: a.Clock.Now, Operators: a.Operators}
	a.Keys.Operators = a.Operators
	a.Idem = &idempotency.Store{DB: a.DB.Bun, Now: a.Clock.Now, Observe: a.observeIdempotency}
	a.Health = &health.Service{DB: a.DB.Bun, Version: Version, Now: a.Clock.Now, StaleAfter: a.Cfg.Worker.StaleAfter,
		CacheFor: a.Cfg.HTTP.ReadyzCacheTTL, Log: a.Log}
	// The schema: every migration this build knows is applied.
	a.Health.Checks = append(a.Health.Checks, health.Check{Name: "schema", Run: func(ctx context.Context) error {
		return db.RequireMigrated(ctx, a.DB, migrations.Set)
	}})
	return nil
}

func (a *App) idempotencyMiddleware() fiber.Handler { return a.Idem.Middleware(a.Log) }

func (a *App) routesPublic(r Routers) {
	a.Health.Routes(r.Public)
	openapi.Routes(r.Public)
}

func (a *App) routesFoundation(r Routers) {
	a.Assets.Routes(r.Checked(r.Platform))
}

func (a *App) jobsFoundation(j *Jobs) error {
	river.AddWorker(j.Workers, &jobs.HeartbeatWorker{DB: a.DB.Bun, Now: a.Clock.Now})
	river.AddWorker(j.Workers, &jobs.PruneIdempotencyWorker{Store: a.Idem, Retention: a.Cfg.HTTP.IdempotencyTTL})
	j.AddPeriodic(a.Cfg.Worker.HeartbeatInterval, jobs.HeartbeatArgs{})
	j.AddPeriodic(time.Hour, jobs.PruneIdempotencyArgs{})
	return nil
}
