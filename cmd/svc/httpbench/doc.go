// Package httpbench is the end-to-end HTTP load benchmark (make bench-http,
// and part of make bench; a short run of a few seconds is part of make
// test). It builds svc and runs the real binaries as separate processes on
// a database of their own: `svc simulator` (the BTCPay and TRON node
// simulators, and the platform's webhook receiver under /platform), `svc
// api` and `svc worker`. It funds 10,000 users, then drives an open-loop
// load (a fixed arrival rate, so that a slow answer cannot slow the load
// down and hide its own latency) through the public API with a real
// readwrite key and a fresh Idempotency-Key per mutating request, using
// vegeta as a library.
//
// For each endpoint alone (balance reads, transaction lists, deposit
// creations, withdrawal creations) and for the mix of them (60/15/15/10) it
// searches the highest arrival rate whose p99 stays at or below 50 ms, and
// reports that rate with its p50, p99 and p99.9 and every answer that was
// not a 2xx. Then it holds the mix at that rate while the simulator pays
// deposits, and measures how long a deposit.settled event takes from its
// settlement's commit to the platform receiver's 2xx, and the CPU and
// memory of every process (from /proc). pgbench TPC-B at 32 clients runs on
// the same server right before the load, as the reference.
//
// BenchmarkCPUPerOperation measures, on a cluster of its own, the CPU of a
// settled deposit, of an auto-approved withdrawal and of a request of the
// mix, each with all the work it sets off done (jobs, the processor's
// webhooks, its events at the receiver), as a number of TPC-B
// transactions of CPU measured right before it (cpu_test.go).
//
// docs/performance.md ("HTTP end to end") has the method, the settings and
// the results.
package httpbench
