package console

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"svc/platform/timefmt"
)

// The overview's charts: per asset, the custody difference (the chain's
// balance less the ledger's custody, CustodyLine.Difference) and what is
// owed (CustodyLine.UserObligations) in each stored reconciliation report
// of the last chartDays days (reconcile.Service.History, what svc admin
// reconciliation --history lists). Each is an SVG drawn here, inline in
// the page (no script, no style attribute: the policy allows neither),
// with a title and a description, and a table of each day's last report
// as its text alternative. The amounts are plotted as floats; the labels
// and the table show the reports' own decimal strings.

// chartDays is how far back the charts go; chartReports bounds the
// reports read (hourly ones, and those made on demand).
const (
	chartDays    = 30
	chartReports = 2000
)

// The SVG's box and plot area, in its user units.
const (
	chartW, chartH         = 640, 200
	chartLeft, chartRight  = 110, 10
	chartTop, chartBottom  = 12, 34
	chartPlotW, chartPlotH = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
	chartMarkersUpTo       = 60 // a point gets a marker when a series has at most this many
)

// assetCharts are one asset's charts.
type assetCharts struct {
	Asset  string
	Charts []chart
	Days   []chartDay
}

// chartDay is a day's last report, a row of the text alternative.
type chartDay struct {
	Day, At, Difference, Obligations string
}

// chart is one series, drawn.
type chart struct {
	ID, Title, Desc  string
	W, H             int
	Points           string // the polyline's
	Markers          []chartXY
	Left, Right      float64 // the plot area's x bounds
	Top, Bottom      float64
	PlotW, PlotH     float64
	Max, Min         string // labels
	From, To         string
	Zero             *float64 // the y of zero, when in range
	LabelX, LabelMid float64
}

type chartXY struct{ X, Y float64 }

type chartPoint struct {
	at    time.Time
	label string
	v     float64
}

// readCharts reads the charts of the last chartDays days at now.
func (s *Server) readCharts(ctx context.Context, now time.Time) ([]assetCharts, error) {
	reports, err := s.opts.Reconcile.History(ctx, chartReports)
	if err != nil {
		return nil, err
	}
	since := now.Add(-chartDays * 24 * time.Hour)
	type series struct{ diff, owed []chartPoint }
	by := map[string]*series{}
	days := map[string]map[string]chartDay{}
	slices.Reverse(reports) // oldest first
	for _, r := range reports {
		if r.CreatedAt.Before(since) {
			continue
		}
		for _, l := range r.Report.Custody {
			se := by[l.Asset]
			if se == nil {
				se, days[l.Asset] = &series{}, map[string]chartDay{}
				by[l.Asset] = se
			}
			d := chartDay{Day: r.CreatedAt.UTC().Format(time.DateOnly), At: timefmt.Format(r.CreatedAt), Difference: "unknown", Obligations: l.UserObligations}
			if v, err := strconv.ParseFloat(l.UserObligations, 64); err == nil {
				se.owed = append(se.owed, chartPoint{r.CreatedAt, l.UserObligations, v})
			}
			if l.Difference != nil {
				d.Difference = *l.Difference
				if v, err := strconv.ParseFloat(*l.Difference, 64); err == nil {
					se.diff = append(se.diff, chartPoint{r.CreatedAt, *l.Difference, v})
				}
			}
			days[l.Asset][d.Day] = d // the day's last report
		}
	}
	var out []assetCharts
	for _, code := range slices.Sorted(maps.Keys(by)) {
		se := by[code]
		ac := assetCharts{Asset: code}
		ac.Charts = append(ac.Charts,
			drawChart("chart-"+code+"-difference", code+": custody difference (chain balance less ledger custody)", se.diff, since, now),
			drawChart("chart-"+code+"-obligations", code+": obligations (what the ledger owes)", se.owed, since, now))
		for _, day := range slices.Sorted(maps.Keys(days[code])) {
			ac.Days = append(ac.Days, days[code][day])
		}
		out = append(out, ac)
	}
	return out, nil
}

// drawChart draws points (oldest first) on the time axis from..to.
func drawChart(id, title string, pts []chartPoint, from, to time.Time) chart {
	c := chart{ID: id, Title: title, W: chartW, H: chartH, Left: chartLeft, Right: chartW - chartRight, Top: chartTop,
		Bottom: chartTop + chartPlotH, PlotW: chartPlotW, PlotH: chartPlotH, From: from.UTC().Format(time.DateOnly), To: to.UTC().Format(time.DateOnly),
		LabelX: chartLeft - 6, LabelMid: chartTop + chartPlotH/2}
	if len(pts) == 0 {
		c.Desc = title + ": no report in the last " + strconv.Itoa(chartDays) + " days."
		return c
	}
	lo, hi := pts[0], pts[0]
	for _, p := range pts {
		if p.v < lo.v {
			lo = p
		}
		if p.v > hi.v {
			hi = p
		}
	}
	c.Min, c.Max = lo.label, hi.label
	minV, maxV := lo.v, hi.v
	if maxV == minV {
		pad := math.Max(math.Abs(maxV)*0.1, 1e-8)
		minV, maxV = minV-pad, maxV+pad
	}
	span := to.Sub(from).Seconds()
	y := func(v float64) float64 { return round2(chartTop + (maxV-v)/(maxV-minV)*chartPlotH) }
	var b strings.Builder
	for i, p := range pts {
		x := round2(chartLeft + p.at.Sub(from).Seconds()/span*chartPlotW)
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%g,%g", x, y(p.v))
		if len(pts) <= chartMarkersUpTo {
			c.Markers = append(c.Markers, chartXY{x, y(p.v)})
		}
	}
	c.Points = b.String()
	if minV < 0 && maxV > 0 {
		z := y(0)
		c.Zero = &z
	}
	last := pts[len(pts)-1]
	c.Desc = fmt.Sprintf("%s, %d reports from %s to %s: lowest %s, highest %s, last %s (%s).", title, len(pts),
		timefmt.Format(pts[0].at), timefmt.Format(last.at), lo.label, hi.label, last.label, timefmt.Format(last.at))
	return c
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
