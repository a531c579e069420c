package console

import (
	"context"
	"net/http"
	"time"

	"svc/modules/alert"
	"svc/modules/health"
	"svc/modules/reconcile"
	"svc/platform/timefmt"
)

// The overview reads what the API and the CLI read, through the same
// services: readiness (health.Service.Readiness, what /readyz answers),
// the open alerts (alert.Service.List, svc admin alerts list --open), and
// the last stored reconciliation report (reconcile.Service.History, svc
// admin reconciliation --history), whose custody lines are per asset. It
// never runs a reconciliation: a report computed on demand is stored and
// may halt or resume withdrawals, which is not a page view's to do.

// overviewAlerts is how many open alerts the overview lists, newest first.
const overviewAlerts = 50

// overview is the overview's data.
type overview struct {
	Ready      bool
	Components []health.Component
	Alerts     []alertRow
	MoreAlerts bool
	Report     *reportView
	Charts     []assetCharts // chart.go
	ReadAt     string
}

type alertRow struct {
	Type, Subject, Detail, CreatedAt string
}

type reportView struct {
	ID          int64
	GeneratedAt string
	Trigger     string
	Healthy     bool
	Consistent  bool
	Alerts      []string
	Custody     []reconcile.CustodyLine
}

// readOverview reads the overview now.
func (s *Server) readOverview(ctx context.Context) (overview, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var o overview
	o.Ready, o.Components = s.opts.Health.Readiness(ctx)
	alerts, err := s.opts.Alerts.List(ctx, alert.ListParams{Open: true, Limit: overviewAlerts + 1})
	if err != nil {
		return overview{}, err
	}
	if len(alerts) > overviewAlerts {
		alerts, o.MoreAlerts = alerts[:overviewAlerts], true
	}
	for _, a := range alerts {
		o.Alerts = append(o.Alerts, alertRow{Type: a.Type, Subject: a.Subject, Detail: a.Detail, CreatedAt: timefmt.Format(a.CreatedAt)})
	}
	reports, err := s.opts.Reconcile.History(ctx, 1)
	if err != nil {
		return overview{}, err
	}
	if len(reports) == 1 {
		r := reports[0]
		o.Report = &reportView{ID: r.ID, GeneratedAt: timefmt.Format(r.CreatedAt), Trigger: r.Trigger, Healthy: r.Healthy,
			Consistent: r.Report.LedgerConsistent, Alerts: r.Report.Alerts, Custody: r.Report.Custody}
	}
	if o.Charts, err = s.readCharts(ctx, s.now()); err != nil {
		return overview{}, err
	}
	o.ReadAt = timefmt.Format(s.now())
	return o, nil
}

// handleOverview is the overview page; with HX-Request (htmx's refresh),
// only its #overview part.
func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	o, err := s.readOverview(r.Context())
	if err != nil {
		s.opts.Log.Error("console: read the overview", "error", err)
		s.fail(w, r, http.StatusServiceUnavailable, "The overview cannot be read now; try again.")
		return
	}
	p := page{Title: "Overview", Data: o}
	if r.Header.Get("HX-Request") == "true" {
		s.renderPart(w, r, http.StatusOK, "overview.html", "overview", p)
		return
	}
	s.render(w, r, http.StatusOK, "overview.html", p)
}
