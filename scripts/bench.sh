#!/usr/bin/env bash
# Runs the Go benchmarks against $DATABASE_URL. Each area's benchmark
# writes its numbers to the console; docs/performance.md records them.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench . -benchtime "${BENCHTIME:-1x}" -timeout 60m ./... 2>&1 | grep -v '^ok\|no test files'
