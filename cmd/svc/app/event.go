package app

import (
	"context"
	"encoding/hex"
	"errors"

	"github.com/riverqueue/river"

	"svc/modules/alert"
	"svc/modules/event"
	"svc/platform/config"
)

// eventArea holds outbound events and operator alerts. Other areas emit
// events with a.Events.Emit inside their transactions and raise operator
// alerts with a.Alerts.Raise.
type eventArea struct {
	Events    *event.Service
	Alerts    *alert.Service
	Deliverer *event.Deliverer
	// Endpoints are the webhook endpoints operators add beside
	// PLATFORM_WEBHOOK_URL.
	Endpoints *event.EndpointService
}

func (a *App) initEvents(context.Context) error {
	a.Alerts = &alert.Service{DB: a.DB.Bun, Log: a.Log, Now: a.Clock.Now}
	a.Events = &event.Service{DB: a.DB.Bun, Inserter: a.Inserter, Now: a.Clock.Now, Operators: a.Operators,
		Waker: event.NewWaker(a.Inserter, a.Log)}
	w := a.Cfg.Webhooks
	hc := event.NewHTTPClient(w.Timeout)
	hc.Transport = a.Tracing.Transport(hc.Transport, "platform webhook")
	sealer, err := endpointSealer(a.Cfg)
	if err != nil {
		return err
	}
	a.Deliverer = &event.Deliverer{
		DB: a.DB.Bun, Inserter: a.Inserter, Alerts: a.Alerts, Now: a.Clock.Now, Log: a.Log,
		URL: w.URL, Secret: []byte(w.Secret), PreviousSecret: []byte(w.PreviousSecret), Timeout: w.Timeout, Client: hc,
		Sealer: sealer,
	}
	a.Endpoints = &event.EndpointService{DB: a.DB.Bun, Now: a.Clock.Now, Sealer: sealer,
		Production: a.Cfg.Production(), URLProblem: config.WebhookURLProblem}
	return nil
}

// endpointSealer is the Sealer of WEBHOOK_ENDPOINT_KEY; without it, the
// development one outside production and none in production (adding an
// endpoint is then refused).
func endpointSealer(cfg config.Config) (*event.Sealer, error) {
	if k := cfg.Webhooks.EndpointKey; k != "" {
		b, err := hex.DecodeString(k)
		if err != nil {
			return nil, errors.New("WEBHOOK_ENDPOINT_KEY: not hex") // never the key itself
		}
		return event.NewSealer(b)
	}
	if cfg.Production() {
		return nil, nil
	}
	return event.DevelopmentSealer(), nil
}

// routesEvents registers the Events API (GET /v1/events, readwrite) and the
// operators' event endpoints (docs/webhooks.md).
func (a *App) routesEvents(r Routers) {
	a.Events.Routes(r.Checked(r.Platform), r.Checked(r.Admin), r.Idem)
	a.Endpoints.EndpointRoutes(r.Checked(r.Admin), r.Idem, a.Deliverer)
}

func (a *App) jobsEvents(j *Jobs) error {
	if a.Cfg.Webhooks.URL == "" {
		a.Log.Warn("PLATFORM_WEBHOOK_URL is not set: outbound events are kept pending until a worker starts with it")
	}
	river.AddWorker(j.Workers, &event.DeliverWorker{Deliverer: a.Deliverer})
	river.AddWorker(j.Workers, &event.DeliverBatchWorker{Deliverer: a.Deliverer})
	river.AddWorker(j.Workers, &event.SweepWorker{Deliverer: a.Deliverer})
	river.AddWorker(j.Workers, &event.EndpointDeliverWorker{Deliverer: a.Deliverer})
	// Also at a worker's start, which drains a backlog once a URL is set.
	j.AddPeriodic(event.SweepEvery, event.SweepArgs{})
	j.Recovery = append(j.Recovery, event.SweepArgs{})
	return nil
}
