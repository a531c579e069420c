package app

import (
	"context"

	"svc/modules/sandbox"
	"svc/platform/config"
)

// sandboxArea holds the test helpers (/v1/test_helpers, docs/sandbox.md).
// They exist only on a test-mode deployment (API_KEY_MODE=test, never in
// production) with a processor; SANDBOX_SIMULATOR_URL names the
// simulator's control API, or, empty, the processor's own is used once it
// answers as the simulator. Elsewhere no helper route is registered: each
// is an unknown route (404). It is initialised after the deposit and
// withdrawal areas, whose services the helpers call.
type sandboxArea struct {
	Sandbox *sandbox.Service
}

func (a *App) initSandbox(context.Context) error {
	c := a.Cfg
	url := c.Sandbox.SimulatorURL
	if c.APIKeys.Mode != "test" || c.Production() || a.BTCPay == nil || url == config.SandboxOff {
		return nil
	}
	sim := &sandbox.Simulator{URL: url, TronURL: c.Tron.URL, StoreID: c.BTCPay.StoreID}
	if url == "" {
		sim.URL, sim.Probe = c.BTCPay.URL, true
	}
	a.Sandbox = &sandbox.Service{DB: a.DB.Bun, Deposits: a.Deposits, Withdrawals: a.Withdrawals, Sim: sim}
	if sim.Probe {
		a.Log.Info("test helpers under /v1/test_helpers: on once the processor answers as the simulator", "url", sim.URL)
	} else {
		a.Log.Info("test helpers under /v1/test_helpers: on, driving the simulator", "url", sim.URL)
	}
	return nil
}

// routesSandbox registers the test helpers, where they exist.
func (a *App) routesSandbox(r Routers) {
	if a.Sandbox != nil {
		a.Sandbox.Routes(r.Checked(r.Platform), r.Idem)
	}
}
