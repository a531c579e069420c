package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"svc/modules/discovery"
	"svc/modules/health"
	"svc/modules/ingress"
	"svc/platform/btcpay"
	"svc/platform/metrics"
	"svc/platform/tron"
)

// processorArea holds the payment processor (BTCPay) and the TRON node
// clients, the ingress webhook and asset discovery. With no BTCPAY_URL the
// processor parts are off (BTCPay, Ingress and Discovery stay nil); with
// no TRONGRID_URL, Tron stays nil.
//
// The deposit and withdrawal areas, initialised after this one, receive
// the processor's events by setting a.Ingress.Invoices and
// a.Ingress.Payouts (when a.Ingress is not nil); until then deliveries are
// only marked processed.
type processorArea struct {
	BTCPay    *btcpay.Client
	Tron      *tron.Client
	Ingress   *ingress.Service
	Discovery *discovery.Service
}

// initProcessor builds the clients; it makes no network call, so a
// processor that is down cannot hold up or stop the API. Discovery runs in
// the worker (at its start, then every DISCOVERY_INTERVAL).
func (a *App) initProcessor(context.Context) error {
	if a.Cfg.Tron.URL != "" {
		c, err := tron.New(a.Cfg.Tron, tron.WithObserver(a.observeUpstream(metrics.UpstreamTronGrid)),
			tron.WithTransport(a.Tracing.Transport(nil, "trongrid")))
		if err != nil {
			return err
		}
		a.Tron = c
		a.Health.Checks = append(a.Health.Checks, health.Check{Name: "tron_node", Run: c.Ping, Upstream: true})
	}
	b := a.Cfg.BTCPay
	if b.URL == "" {
		a.Log.Info("BTCPAY_URL is not set: the payment processor, its webhook ingress and asset discovery are off")
		return nil
	}
	c, err := btcpay.New(btcpay.Options{URL: b.URL, APIKey: b.APIKey, StoreID: b.StoreID, Timeout: b.Timeout,
		Observe: a.observeUpstream(metrics.UpstreamBTCPay), Transport: a.Tracing.Transport(btcpay.NewTransport(), "btcpay")})
	if err != nil {
		return err
	}
	a.BTCPay = c
	a.Ingress = &ingress.Service{DB: a.DB.Bun, Inserter: a.Inserter, Secret: b.WebhookSecret, StoreID: b.StoreID,
		Now: a.Clock.Now, Log: a.Log, Waker: ingress.NewWaker(a.Inserter, a.Log)}
	a.Discovery = &discovery.Service{Processor: c, Assets: a.Assets, LightningEnabled: a.Cfg.Chain.LightningEnabled, Log: a.Log,
		MissesToDisable: discovery.DefaultMissesToDisable, Alerts: a.Alerts}
	a.Health.Checks = append(a.Health.Checks, health.Check{Name: "processor", Upstream: true, Classify: refusal, Run: func(ctx context.Context) error {
		// A cheap authenticated, store-scoped call: it proves the URL, the
		// key and the key's access to the store.
		_, err := c.StorePaymentMethods(ctx, true)
		return err
	}})
	return nil
}

func (a *App) routesProcessor(Routers) {}

// routesProcessorPublic registers routes that need no API key (the ingress
// webhook).
func (a *App) routesProcessorPublic(r Routers) {
	if a.Ingress != nil {
		a.Ingress.Routes(r.Public)
	}
}

func (a *App) jobsProcessor(j *Jobs) error {
	if a.Ingress != nil {
		river.AddWorker(j.Workers, &ingress.Worker{Service: a.Ingress})
		river.AddWorker(j.Workers, &ingress.BatchWorker{Service: a.Ingress})
		river.AddWorker(j.Workers, &ingress.SweepWorker{Service: a.Ingress})
		j.AddPeriodic(ingress.SweepEvery, ingress.SweepArgs{})
		j.Recovery = append(j.Recovery, ingress.SweepArgs{})
		river.AddWorker(j.Workers, &ingress.PruneWorker{Service: a.Ingress, Retention: a.Cfg.HTTP.IngressRetention})
		j.AddPeriodic(time.Hour, ingress.PruneArgs{})
	}
	if a.Discovery != nil {
		river.AddWorker(j.Workers, &discovery.Worker{Service: a.Discovery})
		j.AddPeriodic(a.Cfg.Worker.DiscoveryEvery, discovery.Args{})
	}
	return nil
}

// refusal names a processor's refusal by its HTTP status (a wrong key is a
// 401), which tells an operator what to fix without showing the
// processor's own text.
func refusal(err error) string {
	var re *btcpay.RefusedError
	if errors.As(err, &re) {
		return fmt.Sprintf("refusing the service's requests (HTTP %d)", re.Status)
	}
	return ""
}
