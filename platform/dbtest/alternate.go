package dbtest

import (
	"fmt"
	"os"
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

// Conditions returns the modes named in the environment variable env, a
// comma-separated list (alone,cadence), in the order of modes, or all of
// them when env is not set; a name that is not a mode fails the benchmark.
func Conditions(tb testing.TB, env string, modes []Mode) []Mode {
	tb.Helper()
	v := os.Getenv(env)
	if v == "" {
		return modes
	}
	want := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if !slices.ContainsFunc(modes, func(m Mode) bool { return m.Name == name }) {
			tb.Fatalf("%s: no condition %q", env, name)
		}
		want[name] = true
	}
	return slices.DeleteFunc(slices.Clone(modes), func(m Mode) bool { return !want[m.Name] })
}

// Spread returns the median, the lowest and the highest of v (0s when v
// is empty).
func Spread(v []float64) (median, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(v))
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return median, s[0], s[len(s)-1]
}

// Ratios reports every mode's mean rate and its ratio to base's mean (the
// load alone), as metrics named NAME_per_s and NAME_pct, and returns a
// line per mode with each run. For each other mode it also pairs every
// run with base's run of the same round (the run just before it when base
// comes just before it in the order: the machine then changed least
// between the two) and reports those ratios and their median, as the
// metric NAME_paired_pct. Modes without runs (not selected) are skipped.
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
		if len(v) == 0 {
			continue
		}
		m := mean(v)
		b.ReportMetric(m, name+"_per_s")
		if name != base && ref > 0 {
			b.ReportMetric(100*m/ref, name+"_pct")
		}
		runs := slices.Clone(v)
		fmt.Fprintf(&out, "%s: mean %.0f/s (%.1f%% of %s); runs %.0f\n", name, m, 100*m/ref, base, runs)
		if name == base || len(rates[base]) != len(v) {
			continue
		}
		var paired []float64
		for i, x := range v {
			if rates[base][i] > 0 {
				paired = append(paired, 100*x/rates[base][i])
			}
		}
		if len(paired) > 0 {
			med, _, _ := Spread(paired)
			b.ReportMetric(med, name+"_paired_pct")
			fmt.Fprintf(&out, "  each run of %s over the %s run of its round: %.1f%%; median %.1f%%\n", name, base, paired, med)
		}
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
