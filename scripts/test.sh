#!/usr/bin/env bash
# make test: the whole suite against a real PostgreSQL (scripts/db.sh finds
# or starts one) and, for the browser tests, Chromium (scripts/chromium.sh
# finds or installs it).
#
# Installing Chromium takes about a minute on a machine without it, so it
# runs beside the other tests: the browser tests' packages (those that use
# platform/browsertest) start once it is there and the race suite is done,
# with the race detector like the rest, and their output follows the rest's.
#
# Every package runs with the race detector but three, which drive the
# service as separate processes built without it: the fault-injection
# harness (cmd/svc/chaos), the HTTP load harness (cmd/svc/httpbench) and the
# client libraries' checks (sdk/sdktest: regenerated clients compared with
# the committed ones, then each client's tests against the service; npm
# installs sdk/typescript's packages from its lockfile when they are missing).
# Under -race only their own drivers would be watched, at about half again
# their CPU (the simulators they embed have race-checked tests of their own
# in their packages). They run beside the rest, started first since the
# fault-injection package is the longest, and their output follows the
# rest's.
#
# It starts with gofmt over the repository's Go files, which fails the run
# before anything else when one is not formatted (make lint adds go vet and
# staticcheck).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
GOFMT=${GOFMT:-$(dirname "$(command -v "$GO")")/gofmt}
unformatted=$("$GOFMT" -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.data/*'))
if [ -n "$unformatted" ]; then
  echo "FAIL: not gofmt-formatted (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi
TEST_PARALLEL=${TEST_PARALLEL:-8}
DATABASE_URL=$(scripts/db.sh)
export DATABASE_URL

processes=(./cmd/svc/chaos/ ./sdk/sdktest/ ./cmd/svc/httpbench/)
browser=(./modules/console/)
out=$(mktemp)
bout=$(mktemp)
trap 'rm -f "$out" "$bout"' EXIT
"$GO" test -count=1 -parallel "$TEST_PARALLEL" -timeout 30m "${processes[@]}" >"$out" 2>&1 &
pid=$!
# The browser tests' Chromium (platform/browsertest), installed when missing
# beside the other tests; a failed install fails them, loudly. The browser
# tests themselves run once the race suite is done: beside it, on a slow
# machine, a page could not answer within browsertest.Timeout.
chrome=$(mktemp)
trap 'rm -f "$out" "$bout" "$chrome"' EXIT
scripts/chromium.sh >"$chrome" 2>"$bout" &
bpid=$!

mapfile -t rest < <("$GO" list ./... | grep -v -e '/cmd/svc/chaos$' -e '/cmd/svc/httpbench$' -e '/sdk/sdktest$' -e '/modules/console$')
status=0
"$GO" test -race -count=1 -parallel "$TEST_PARALLEL" -timeout 30m "${rest[@]}" || status=$?
if wait "$bpid" && [ -s "$chrome" ]; then
  SVC_CHROMIUM=$(cat "$chrome") "$GO" test -race -count=1 -parallel "$TEST_PARALLEL" -timeout 30m "${browser[@]}" >>"$bout" 2>&1 || status=$?
else
  echo "FAIL: no Chromium for the browser tests (${browser[*]})" >>"$bout"
  status=1
fi
wait "$pid" || status=$?
cat "$bout" "$out"
exit "$status"
