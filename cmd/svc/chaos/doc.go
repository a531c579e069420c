// Package chaos is the fault-injection harness (make chaos; a short run is
// part of make test). It runs the real svc binaries as separate processes,
// two `svc api` behind a load balancer and two `svc worker`, on a private
// PostgreSQL server, with the BTCPay and TronGrid simulators and a platform
// webhook receiver, drives a seeded mixed workload through the public API,
// and meanwhile kills processes with SIGKILL, restarts the database at once,
// and makes the processor and the receiver fail. Invariants are checked
// while it runs and once everything has settled; docs/reliability.md has
// the method, the figures and how to replay a seed.
//
// TestFailover (make failover; one failover and its fail-back in make
// test) runs the same processes and workload on a PostgreSQL primary with
// a synchronous streaming standby, both named in a multi-host DATABASE_URL,
// kills the primary, has the standby promoted and rebuilds the old primary
// as the new standby, round after round: in make test the harness promotes
// at once (pg_ctl promote, pg_rewind); make failover runs the servers under
// pg_auto_failover, whose monitor detects the lost host and promotes by
// itself (FAILOVER_MANAGER).
package chaos
