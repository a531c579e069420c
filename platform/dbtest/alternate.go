package dbtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Mode is one condition of Alternate: a job that runs beside the load
// until stop is closed (nil: the load alone).
type Mode struct {
	Name string
	Job  func(stop <-chan struct{})
}

// Alternate measures a load under several conditions on a machine whose
// speed varies (one shared with other work): it runs load once per mode,
// in the order given, rounds times, each with that mode's job beside it,
// so that every mode sees the machine at every stage of the run. load
// returns its rate. The result is every run's rate by mode name; Ratios
// summarises it.
func Alternate(b *testing.B, rounds int, modes []Mode, load func() float64) map[string][]float64 {
	b.Helper()
	rates := map[string][]float64{}
	for r := range rounds {
		for _, m := range modes {
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				if m.Job != nil {
					m.Job(stop)
				}
			}()
			rate := load()
			close(stop)
			<-done
			rates[m.Name] = append(rates[m.Name], rate)
			// Printed, not logged: a benchmark's log is cut after a few lines.
			fmt.Printf("round %d, %s: %.0f/s\n", r+1, m.Name, rate)
		}
	}
	return rates
}

// Ratios reports every mode's mean rate and its ratio to base's mean (the
// load alone), as metrics named NAME_per_s and NAME_pct, and returns a
// line per mode with each run.
func Ratios(b *testing.B, rates map[string][]float64, base string, order []string) string {
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(max(len(v), 1))
	}
	ref := mean(rates[base])
	var out strings.Builder
	for _, name := range order {
		v := rates[name]
		m := mean(v)
		b.ReportMetric(m, name+"_per_s")
		if name != base && ref > 0 {
			b.ReportMetric(100*m/ref, name+"_pct")
		}
		runs := slices.Clone(v)
		fmt.Fprintf(&out, "%s: mean %.0f/s (%.1f%% of %s); runs %.0f\n", name, m, 100*m/ref, base, runs)
	}
	return out.String()
}

// Every calls fn every interval, the first time after first, until stop
// is closed.
func Every(stop <-chan struct{}, first, interval time.Duration, fn func()) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fn()
			t.Reset(interval)
		}
	}
}

// Loop calls fn again and again until stop is closed.
func Loop(stop <-chan struct{}, fn func()) {
	for {
		select {
		case <-stop:
			return
		default:
			fn()
		}
	}
}
