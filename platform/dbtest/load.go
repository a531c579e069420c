package dbtest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Load is what RunClients measured: how long the run took, operations per
// second, and the latency percentiles of one operation in milliseconds,
// and the slowest operation's.
type Load struct {
	Elapsed             time.Duration
	Rate, P50, P99, Max float64
}

// Report adds the measurement to the benchmark's output (ops/s, p50_ms,
// p99_ms).
func (l Load) Report(b *testing.B) {
	b.ReportMetric(l.Rate, "ops/s")
	b.ReportMetric(l.P50, "p50_ms")
	b.ReportMetric(l.P99, "p99_ms")
}

// RunClients runs op in a loop from clients goroutines for dur (a closed
// loop: each client sends its next operation when the last one answered)
// and measures it; the benchmark's timer covers only the run. seq numbers
// the operations across clients from 1. The first error ends the
// benchmark. b may be a test (a short run that keeps a benchmark from
// rotting): there is no timer to reset then.
func RunClients(b testing.TB, clients int, dur time.Duration, op func(client int, seq int64) error) Load {
	b.Helper()
	var (
		seq     atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		lat     []time.Duration
		errOnce sync.Once
		first   error
	)
	bench, _ := b.(*testing.B)
	if bench != nil {
		bench.ResetTimer()
	}
	start := time.Now()
	deadline := start.Add(dur)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 4096)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := op(c, seq.Add(1)); err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if bench != nil {
		bench.StopTimer()
	}
	if first != nil {
		b.Fatal(first)
	}
	if len(lat) == 0 {
		b.Fatal("dbtest: no operation completed")
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	return Load{Elapsed: elapsed, Rate: float64(len(lat)) / elapsed.Seconds(), P50: pct(0.50), P99: pct(0.99), Max: float64(lat[len(lat)-1].Microseconds()) / 1000}
}
