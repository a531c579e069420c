package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReplicaStats is what the read replica (DATABASE_READ_URL) reports at
// scrape time.
type ReplicaStats struct {
	// InUse: the replica is reachable and within DATABASE_READ_MAX_LAG, so
	// the lists read it.
	InUse bool
	// Staleness bounds how far behind the primary the replica was at the
	// last probe, in seconds; negative when unknown (unreachable).
	Staleness float64
	// Served counts the reads the replica answered; Fallbacks the reads
	// that could have gone to it and went to the primary, by reason.
	Served    int64
	Fallbacks map[string]int64
}

// replicaCollector reads the replica's state at scrape time.
type replicaCollector struct {
	read                                func() ReplicaStats
	inUse, staleness, served, fallbacks *prometheus.Desc
}

// RegisterReplica adds the read replica's families (registered only when
// DATABASE_READ_URL is set).
func (m *Metrics) RegisterReplica(read func() ReplicaStats) {
	d := describer("db_replica")
	m.Registry.MustRegister(&replicaCollector{
		read:      read,
		inUse:     d("in_use", "1 while the lists read the replica (reachable, within DATABASE_READ_MAX_LAG), 0 while they read the primary."),
		staleness: d("staleness_seconds", "How far behind the primary the replica was at the last probe, at most (absent while unreachable)."),
		served:    d("reads_total", "Reads the replica answered."),
		fallbacks: d("fallbacks_total", "Reads that could have gone to the replica and read the primary: unreachable, lagging (beyond DATABASE_READ_MAX_LAG or not yet probed), not_replicated (a cursor the replica has not replayed).", "reason"),
	})
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inUse, c.staleness, c.served, c.fallbacks} {
		ch <- d
	}
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	inUse := 0.0
	if s.InUse {
		inUse = 1
	}
	ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, inUse)
	if s.Staleness >= 0 {
		ch <- prometheus.MustNewConstMetric(c.staleness, prometheus.GaugeValue, s.Staleness)
	}
	ch <- prometheus.MustNewConstMetric(c.served, prometheus.CounterValue, float64(s.Served))
	for reason, n := range s.Fallbacks {
		ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(n), reason)
	}
}
