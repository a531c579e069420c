package metrics

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector reads the pgx pool's statistics at scrape time. Every
// database statement of the process, bun's, River's and the ledger's, takes
// its connection from this pool, so a pool that is exhausted is the
// process's throughput limit: svc_db_pool_acquired_connections at
// svc_db_pool_max_connections, and acquires that had to wait
// (svc_db_pool_empty_acquires_total, svc_db_pool_empty_acquire_wait_seconds_total).
type poolCollector struct {
	pool *pgxpool.Pool

	max, acquired, idle, total, constructing     *prometheus.Desc
	acquires, emptyAcquires, emptyWait, canceled *prometheus.Desc
}

// RegisterPool adds the statistics of pool.
func (m *Metrics) RegisterPool(pool *pgxpool.Pool) {
	d := describer("db_pool")
	m.Registry.MustRegister(&poolCollector{
		pool:          pool,
		max:           d("max_connections", "DATABASE_MAX_CONNS: the most connections the pool opens."),
		acquired:      d("acquired_connections", "Connections in use now."),
		idle:          d("idle_connections", "Connections open and idle now."),
		total:         d("total_connections", "Connections open now (idle, in use and being opened)."),
		constructing:  d("constructing_connections", "Connections being opened now."),
		acquires:      d("acquires_total", "Connections handed out."),
		emptyAcquires: d("empty_acquires_total", "Connections handed out after waiting, because none was idle."),
		emptyWait:     d("empty_acquire_wait_seconds_total", "Time spent waiting for a connection when none was idle."),
		canceled:      d("canceled_acquires_total", "Waits for a connection given up (the caller's context ended first)."),
	})
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.max, c.acquired, c.idle, c.total, c.constructing, c.acquires, c.emptyAcquires, c.emptyWait, c.canceled} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.max, float64(s.MaxConns()))
	gauge(c.acquired, float64(s.AcquiredConns()))
	gauge(c.idle, float64(s.IdleConns()))
	gauge(c.total, float64(s.TotalConns()))
	gauge(c.constructing, float64(s.ConstructingConns()))
	counter(c.acquires, float64(s.AcquireCount()))
	counter(c.emptyAcquires, float64(s.EmptyAcquireCount()))
	counter(c.emptyWait, s.EmptyAcquireWaitTime().Seconds())
	counter(c.canceled, float64(s.CanceledAcquireCount()))
}
