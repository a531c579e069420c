#!/usr/bin/env bash
# make run: brings the whole service up locally and prints how to call it.
# Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
export PORT="${PORT:-8080}"
SIM_PORT="${SIM_PORT:-8090}"
RECEIVER_PORT="${RECEIVER_PORT:-8091}"
export DATABASE_URL MIGRATE_DATABASE_URL
ADMIN_URL=$(scripts/db.sh)
# Two roles, as in production (docs/operations.md): migrate runs as the
# schema owner and grants the runtime role, which the api and the worker
# connect as. Without a superuser URL (roles cannot be made), one URL.
if roles=$(scripts/db.sh roles "$ADMIN_URL" 2>/dev/null); then
  MIGRATE_DATABASE_URL=$(printf '%s\n' "$roles" | sed -n 1p)
  DATABASE_URL=$(printf '%s\n' "$roles" | sed -n 2p)
else
  echo "run: could not create the owner and runtime roles on $ADMIN_URL; using it for everything (the ledger's guards then do not hold against the service's own role)" >&2
  MIGRATE_DATABASE_URL=$ADMIN_URL
  DATABASE_URL=$ADMIN_URL
fi
export SVC_CONFIG_FILE="${SVC_CONFIG_FILE:-configs/local.yaml}"
mkdir -p .data/logs
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped (the database keeps running; make db-stop stops it)"
}
trap cleanup EXIT
trap 'exit 0' INT TERM # a requested stop is a clean exit (cleanup runs on EXIT)

bin/svc migrate
# shellcheck source=/dev/null
[ -f scripts/run_extra.sh ] && source scripts/run_extra.sh
bin/svc api    > .data/logs/api.log 2>&1 & pids+=($!)
bin/svc worker > .data/logs/worker.log 2>&1 & pids+=($!)
ADMIN_UI_ADDR="${ADMIN_UI_ADDR:-127.0.0.1:8092}"
bin/svc admin ui --addr "$ADMIN_UI_ADDR" > .data/logs/admin-ui.log 2>&1 & pids+=($!)
export CONSOLE_ADDR="${CONSOLE_ADDR:-127.0.0.1:8093}"
bin/svc admin console > .data/logs/console.log 2>&1 & pids+=($!)

for _ in $(seq 1 100); do curl -fsS "localhost:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
# The first operator: minting keys and every money action of svc admin are
# signed with an enrolled operator's key. make run enrolls "dev" (an admin)
# with a key kept under .data, once per database.
export SVC_OPERATOR_KEY="$PWD/.data/operator-dev.key"
[ -f "$SVC_OPERATOR_KEY" ] || bin/svc admin operators keygen --out "$SVC_OPERATOR_KEY" > /dev/null
bin/svc admin operators init --name dev --key "$SVC_OPERATOR_KEY" > /dev/null 2>&1 || true # only while no operator exists
RW=$(bin/svc admin keys mint --scope readwrite --label "make run platform" | tail -n1)
ADMIN=$(bin/svc admin keys mint --scope admin --label "make run operator" | tail -n1)
cat <<MSG

svc is running (logs in .data/logs/):
  API          http://localhost:$PORT   (docs: http://localhost:$PORT/docs)
  River UI     http://$ADMIN_UI_ADDR/   (jobs and queues; user: any, password: the admin key below)
  console      http://localhost:${CONSOLE_ADDR##*:}/   (sign in with a passkey: make one at /passkeys/new, then
               svc admin operators add-key dev --public-key webauthn:... )
  database     $DATABASE_URL (runtime role; migrations: $MIGRATE_DATABASE_URL)

Dev keys (minted just now):
  readwrite    $RW
  admin        $ADMIN

Operator "dev" (admin), whose key signs svc admin's money actions:
  export SVC_OPERATOR_KEY=$SVC_OPERATOR_KEY

Try:
  curl -s localhost:$PORT/healthz
  curl -s localhost:$PORT/readyz
  curl -s -H "Authorization: Bearer $RW" localhost:$PORT/v1/assets
  curl -s -H "Authorization: Bearer $RW" localhost:$PORT/v1/users/alice/balances
MSG
[ "$(type -t run_extra_help)" = function ] && run_extra_help
echo; echo "Ctrl-C stops everything."
wait
