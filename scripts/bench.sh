#!/usr/bin/env bash
# Runs the Go benchmarks against $DATABASE_URL and, as the reference for
# the ledger's numbers, pgbench's TPC-B on the same server with the same
# client counts; then prints every ledger result as a ratio of it.
# docs/performance.md records the results.
#
# The reference runs twice: once standalone at 1, 8 and 32 clients, and
# again right before every ledger case (the ledger benchmark calls pgbench
# itself), so that each ratio compares runs that saw the same machine.
#
# Environment (all optional):
#   BENCHTIME              go test -benchtime (default 1x: each ledger case
#                          runs for its own duration anyway)
#   LEDGER_BENCH_DURATION  how long each ledger case runs (default 10s)
#   PGBENCH_SECONDS        how long each standalone pgbench run lasts (default 20)
#   PGBENCH_CLIENTS        client counts of the standalone pgbench runs
#                          (default "1 8 32")
#   PGBENCH_SCALE          pgbench scale factor (default 32, one branch per
#                          client at the highest count, so TPC-B's branch
#                          rows are not an artificial hot spot)
#   BENCH_PACKAGES         packages to benchmark (default ./...; make
#                          bench-http: ./cmd/svc/httpbench/, the HTTP load
#                          benchmark of the real binaries and the CPU per
#                          money operation, which print their own targets;
#                          HTTPBENCH_* settings in docs/performance.md)
#   WITHDRAWAL_BENCH_ROUNDS rounds of pgbench-then-case of each withdrawal
#                          creation case (default 3; the median is reported)
#   WITHDRAWAL_BENCH_CONNS the service's pool in those cases (default four
#                          per core)
#   BENCH_FILTER           go test -bench pattern (default .; make
#                          bench-scale: BenchmarkLedgerScale)
#   LEDGER_SCALE_POSTINGS  the sizes of BenchmarkLedgerScale's generated
#                          books (default "100000 10000000"; kept between
#                          runs, make bench-scale-drop drops them)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must be set (make bench finds or starts a server)}"

pgtool() { # name: print the path of a PostgreSQL client program
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return 0; fi
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
clients="${PGBENCH_CLIENTS:-1 8 32}"
cores=$(nproc 2>/dev/null || echo 2)

# 1. The reference: pgbench TPC-B in its own database on the same server.
if PGBENCH=$(pgtool pgbench) && PSQL=$(pgtool psql); then
  # One database per run: two runs on one server (a shared machine) must
  # not drop or re-initialise each other's reference mid-case.
  pgdb="svc_pgbench_$$"
  pgurl=$(printf '%s' "$DATABASE_URL" | sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\\1/$pgdb#")
  "$PSQL" "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $pgdb" -c "CREATE DATABASE $pgdb" >/dev/null
  echo "pgbench: initialising scale ${PGBENCH_SCALE:-32}" >&2
  "$PGBENCH" -i -q -s "${PGBENCH_SCALE:-32}" "$pgurl" >/dev/null 2>&1
  for c in $clients; do
    j=$(( c < cores ? c : cores ))
    tps=$("$PGBENCH" -c "$c" -j "$j" -T "${PGBENCH_SECONDS:-20}" "$pgurl" 2>/dev/null | awk '/^tps/ {print $3}')
    echo "pgbench TPC-B clients=$c tps=$tps"
    echo "$c $tps" >>"$out/pgbench"
  done
  export LEDGER_PGBENCH="$PGBENCH" LEDGER_PGBENCH_URL="$pgurl"
  trap 'rm -rf "$out"; "$PSQL" "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $pgdb" >/dev/null 2>&1 || true' EXIT
else
  echo "pgbench or psql not found: no reference, no ratios" >&2
  : >"$out/pgbench"
fi

# 2. The Go benchmarks.
# shellcheck disable=SC2086
go test -run '^$' -bench "${BENCH_FILTER:-.}" -benchtime "${BENCHTIME:-1x}" -timeout 120m ${BENCH_PACKAGES:-./...} 2>&1 \
  | grep -v '^ok\|no test files' | tee "$out/go"

# 3. Every per-second result as a ratio of pgbench at the same writer count,
# and the ledger's targets.
awk -v ref="$out/pgbench" '
BEGIN {
  while ((getline line < ref) > 0) { split(line, f, " "); tps[f[1]] = f[2] }
}
/entries\/s/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  w = name; sub(/.*writers=/, "", w)
  eps = 0; ref = 0
  for (i = 2; i <= NF; i++) {
    if ($i == "entries/s") eps = $(i - 1)
    if ($i == "tpcb_tps") ref = $(i - 1)
  }
  key = name; sub(/^BenchmarkLedger\//, "", key); sub(/\/writers=[0-9]+$/, "", key)
  rate[key, w] = eps
  # The reference run right before the case, else the standalone one.
  base[key, w] = (ref > 0) ? ref : tps[w]
  rows[++n] = key SUBSEP w
}
END {
  if (n == 0) exit
  print ""
  print "Ledger entries per second as a ratio of pgbench TPC-B transactions per second (same server, same clients,"
  print "pgbench run right before each case):"
  printf "  %-40s %8s %12s %12s %7s\n", "case", "writers", "entries/s", "pgbench tps", "ratio"
  for (i = 1; i <= n; i++) {
    split(rows[i], k, SUBSEP)
    b = base[k[1], k[2]]
    r = (b > 0) ? sprintf("%6.0f%%", 100 * rate[k[1], k[2]] / b) : "     -"
    printf "  %-40s %8s %12.0f %12.0f %7s\n", k[1], k[2], rate[k[1], k[2]], b, r
  }
  print ""
  print "Targets (shipped design: derived system balances):"
  d = rate["derived/deposit_spread", 32]; t = base["derived/deposit_spread", 32]
  if (d > 0 && t > 0) printf "  deposit credits, 32 writers: %.0f%% of TPC-B (target 80%%): %s\n", 100 * d / t, (d >= 0.8 * t ? "met" : "NOT met")
  s = rate["derived/deposit_spread_3_assets", 32]
  if (d > 0 && s > 0) printf "  one hot system account (every credit on BTC custody) vs credits spread over three assets'"'"' system accounts, 32 writers: %.0f%% (target 75%%): %s\n", 100 * d / s, (d >= 0.75 * s ? "met" : "NOT met")
  h = rate["derived/deposit_one_user", 32]
  if (d > 0 && h > 0) printf "  all credits to one user vs spread over users, 32 writers: %.0f%% (one user'"'"'s balance row serializes by design)\n", 100 * h / d
  o = rate["onerow/deposit_spread", 32]; sh = rate["sharded16/deposit_spread", 32]
  if (d > 0 && o > 0 && sh > 0) printf "  system balances at 32 writers: derived %.0f, sharded(16) %.0f, one row %.0f entries/s\n", d, sh, o
}' "$out/go"

# 4. Withdrawal creation as a ratio of pgbench at the same client count, and
# its target (50% of TPC-B at 32 clients).
awk '
/^BenchmarkCreateWithdrawal\// {
  name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkCreateWithdrawal\//, "", name)
  ops = 0; ref = 0; p99 = 0
  for (i = 2; i <= NF; i++) {
    if ($i == "ops/s") ops = $(i - 1)
    if ($i == "tpcb_tps") ref = $(i - 1)
    if ($i == "p99_ms") p99 = $(i - 1)
  }
  rows[++n] = name; rate[name] = ops; base[name] = ref; lat[name] = p99
}
END {
  if (n == 0) exit
  print ""
  print "Withdrawal creation per second as a ratio of pgbench TPC-B (same server, same clients; each case runs"
  print "WITHDRAWAL_BENCH_ROUNDS rounds of pgbench then the case, and the round with the median ratio is shown):"
  printf "  %-28s %10s %10s %12s %7s\n", "case", "ops/s", "p99 ms", "pgbench tps", "ratio"
  for (i = 1; i <= n; i++) {
    k = rows[i]
    r = (base[k] > 0) ? sprintf("%6.0f%%", 100 * rate[k] / base[k]) : "     -"
    printf "  %-28s %10.0f %10.1f %12.0f %7s\n", k, rate[k], lat[k], base[k], r
  }
  c = rate["create/clients=32"]; t = base["create/clients=32"]
  if (c > 0 && t > 0) printf "  withdrawal creation, 32 clients: %.0f%% of TPC-B (target 50%%): %s\n", 100 * c / t, (c >= 0.5 * t ? "met" : "NOT met")
}' "$out/go"

# 5. The ledger at scale: credits as a ratio of pgbench at 32 clients, per
# size of the generated book.
awk '
/^BenchmarkLedgerScale\// {
  name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkLedgerScale\//, "", name)
  for (i = 2; i <= NF; i++) v[name, $i] = $(i - 1)
  rows[++n] = name
}
END {
  if (n == 0) exit
  print ""
  print "The ledger at scale (generated books; reads at 8 clients, credits at 32 writers with pgbench TPC-B right before):"
  print "  (p50/p99 in ms; the full check and report, then the incremental check and the report with it, in s)"
  printf "  %-18s %7s %11s %11s %11s %6s %6s %6s %6s %9s %7s\n", "book", "db MB", "balance", "first page", "deep page",
    "check", "report", "incr", "report", "credits/s", "% TPC-B"
  for (i = 1; i <= n; i++) {
    k = rows[i]
    printf "  %-18s %7.0f %5.2f/%-5.1f %5.2f/%-5.1f %5.2f/%-5.1f %6.2f %6.2f %6.2f %6.2f %9.0f %7s\n", k, v[k, "db_MB"],
      v[k, "balance_p50_ms"], v[k, "balance_p99_ms"], v[k, "first_page_p50_ms"], v[k, "first_page_p99_ms"],
      v[k, "deep_page_p50_ms"], v[k, "deep_page_p99_ms"], v[k, "check_s"], v[k, "reconcile_s"],
      v[k, "incremental_check_s"], v[k, "reconcile_incremental_s"], v[k, "credits/s"],
      (v[k, "pct_of_tpcb"] == "" ? "-" : sprintf("%.0f%%", v[k, "pct_of_tpcb"]))
  }
}' "$out/go"

# 6. Money moving inside the platform (BenchmarkInside): operations per
# second as a ratio of the pgbench run right before each case, and their
# targets; the hot account's designs (BenchmarkInsideHot) as a ratio of the
# spread case of the same run.
awk '
/^BenchmarkInside(Hot)?\// {
  name = $1; sub(/-[0-9]+$/, "", name)
  bench = name; sub(/\/.*/, "", bench); sub(/^Benchmark/, "", bench)
  key = name; sub(/^BenchmarkInside(Hot)?\//, "", key); sub(/\/writers=[0-9]+$/, "", key)
  for (i = 2; i <= NF; i++) v[bench, key, $i] = $(i - 1)
  rows[++n] = bench SUBSEP key
}
END {
  if (n == 0) exit
  print ""
  print "Transfers, trades and escrow holds, 32 writers, as a ratio of pgbench TPC-B run right before each case"
  print "(and the hot-account cases as a ratio of the spread case of the same benchmark):"
  printf "  %-10s %-28s %9s %12s %8s %9s %9s\n", "benchmark", "case", "ops/s", "pgbench tps", "% TPC-B", "% spread", "deadlocks"
  for (i = 1; i <= n; i++) {
    split(rows[i], k, SUBSEP)
    ops = v[k[1], k[2], "ops/s"]; t = v[k[1], k[2], "tpcb_tps"]; sp = v[k[1], k[2], "pct_of_spread"]
    printf "  %-10s %-28s %9.0f %12.0f %8s %9s %9d\n", k[1], k[2], ops, t, (t > 0 ? sprintf("%.0f%%", 100 * ops / t) : "-"),
      (sp != "" ? sprintf("%.0f%%", sp) : "-"), v[k[1], k[2], "deadlocks"]
  }
  target = "Inside"
  s = v[target, "transfer_spread", "ops/s"]; st = v[target, "transfer_spread", "tpcb_tps"]
  h = v[target, "transfer_hot", "ops/s"]
  r = v[target, "trade", "ops/s"]; rt = v[target, "trade", "tpcb_tps"]; dl = v[target, "trade", "deadlocks"]
  c = v[target, "hold_capture", "ops/s"]; ct = v[target, "hold_capture", "tpcb_tps"]
  if (s > 0 && st > 0) printf "  one-leg transfers over 10,000 users: %.0f%% of TPC-B (target 80%%): %s\n", 100 * s / st, (s >= 0.8 * st ? "met" : "NOT met")
  if (s > 0 && h > 0) printf "  every transfer credits revenue: %.0f%% of the spread case (target 75%%): %s\n", 100 * h / s, (h >= 0.75 * s ? "met" : "NOT met")
  if (r > 0 && rt > 0) printf "  two-asset trades: %.0f%% of TPC-B (target 40%%), %d deadlocks: %s\n", 100 * r / rt, dl, (r >= 0.4 * rt && dl == 0 ? "met" : "NOT met")
  if (c > 0 && ct > 0) printf "  hold then capture into two accounts: %.0f%% of TPC-B (target 40%%): %s\n", 100 * c / ct, (c >= 0.4 * ct ? "met" : "NOT met")
}' "$out/go"

# 7. Transfers over HTTP (BenchmarkHTTPTransfers): the better of its two
# closed-loop rounds as a ratio of the pgbench run right before it.
awk '
/^BenchmarkHTTPTransfers/ {
  for (i = 2; i <= NF; i++) if ($i == "transfers_32_clients_pct_of_tpcb") p = $(i - 1)
  seen = 1
}
END {
  if (!seen) exit
  printf "  transfers over HTTP, 32 clients in a closed loop: %.0f%% of TPC-B (target 50%%): %s\n", p, (p >= 50 ? "met" : "NOT met")
}' "$out/go"

# 8. CPU per operation (BenchmarkCPUPerOperation, cmd/svc/httpbench): each
# money operation's CPU, all its work counted, in TPC-B transactions of CPU
# measured right before it, with its target, as the benchmark printed it.
if grep -q 'cpu ratio: ' "$out/go"; then
  echo
  echo "CPU per operation in TPC-B transactions of CPU (api, worker and PostgreSQL against PostgreSQL and pgbench; TPC-B right before each):"
  sed -n 's/^.*cpu ratio: /  /p' "$out/go"
fi
