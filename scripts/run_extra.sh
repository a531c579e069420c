# shellcheck shell=bash
# Sourced by scripts/run.sh before the API starts: runs the BTCPay Server
# simulator (with the TRON node simulator under /tron) and points the
# service at it. Set BTCPAY_URL (and its key, store and webhook secret)
# before `make run` to use a real BTCPay Server instead.
# shellcheck disable=SC2154 # pids, PORT, RW and ADMIN come from scripts/run.sh

SIM_PORT="${SIM_PORT:-8090}"
if [ -z "${BTCPAY_URL:-}" ]; then
  export PROCESSOR_WEBHOOK_SECRET="${PROCESSOR_WEBHOOK_SECRET:-local-webhook-secret}"
  sim_args=(--addr "127.0.0.1:$SIM_PORT")
  # The simulator also plays the platform's webhook receiver, unless a real
  # PLATFORM_WEBHOOK_URL is given.
  [ -z "${PLATFORM_WEBHOOK_URL:-}" ] && sim_args+=(--platform-secret "${PLATFORM_WEBHOOK_SECRET:-local-platform-secret}")
  # BTCPAY_URL, BTCPAY_API_KEY, BTCPAY_STORE_ID, TRONGRID_URL, TRON_HOT_WALLET, USDT_POOL_ADDRESSES
  eval "$(bin/svc simulator "${sim_args[@]}" --print-env)"
  # The test helpers (/v1/test_helpers, docs/sandbox.md) drive this simulator.
  export SANDBOX_SIMULATOR_URL="${SANDBOX_SIMULATOR_URL:-$BTCPAY_URL}"
  bin/svc simulator "${sim_args[@]}" \
    --webhook-url "http://localhost:$PORT/webhooks/processor" \
    --webhook-secret "$PROCESSOR_WEBHOOK_SECRET" > .data/logs/simulator.log 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do curl -fsS "$BTCPAY_URL/_sim/" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS "$BTCPAY_URL/_sim/" >/dev/null || { echo "the simulator did not start: see .data/logs/simulator.log" >&2; exit 1; }
fi

run_extra_help() {
  if [ -z "${TRONGRID_URL:-}" ] || ! curl -fsS "$BTCPAY_URL/_sim/" >/dev/null 2>&1; then
    echo; echo "Payment processor: $BTCPAY_URL (not the simulator)"
    return
  fi
  cat <<MSG

Payment processor: the BTCPay simulator at $BTCPAY_URL (store $BTCPAY_STORE_ID, regtest),
TRON node simulator at $TRONGRID_URL; webhooks go to localhost:$PORT/webhooks/processor.
Assets are discovered from the simulated store when the worker starts (USDT_TRC20 and BTC_LN
appear in /v1/assets within seconds). Drive the simulator (docs/simulator.md has every route):
  curl -s $BTCPAY_URL/_sim/invoices                                   # invoices, newest last
  curl -s -XPOST $BTCPAY_URL/_sim/invoices/<invoiceId>/pay            # pay what is due
  curl -s -XPOST $BTCPAY_URL/_sim/invoices/<invoiceId>/pay -d '{"amounts":["0.0004","0.0006"]}'
  curl -s -XPOST $BTCPAY_URL/_sim/invoices/<invoiceId>/confirm        # confirm its payments
  curl -s -XPOST $BTCPAY_URL/_sim/invoices/<invoiceId>/expire         # end its window now
  curl -s -XPOST $BTCPAY_URL/_sim/invoices/<invoiceId>/mark-settled   # an operator marks it paid
  curl -s $BTCPAY_URL/_sim/payouts
  curl -s -XPOST $BTCPAY_URL/_sim/payouts/<payoutId>/complete          # or broadcast, fail, stall
  curl -s -XPOST $BTCPAY_URL/_sim/wallet/receive -d '{"amount":"0.01","confirmations":1}'
  curl -s -XPOST $BTCPAY_URL/_sim/feerate -d '{"feeRate":"12.5"}'
  curl -s -XPOST $BTCPAY_URL/_sim/methods -d '{"paymentMethods":["BTC-CHAIN"]}'   # drop LN and USDT
  curl -s -XPOST $BTCPAY_URL/_sim/down -d '{"mode":"error"}'; curl -s -XPOST $BTCPAY_URL/_sim/up
  curl -s $BTCPAY_URL/_sim/webhooks                                   # deliveries and their answers
  curl -s $TRONGRID_URL/sim/state
Or move your own deposits and withdrawals with the readwrite key (docs/sandbox.md):
  curl -s -XPOST -H "Authorization: Bearer $RW" -H "Idempotency-Key: pay-1" -H 'Content-Type: application/json' \\
    localhost:$PORT/v1/test_helpers/deposits/<depositId>/pay -d '{"confirmed":true}'
Webhooks the service sends to the platform (verified and deduplicated by the stand-in receiver):
  curl -s ${PLATFORM_WEBHOOK_URL%/webhooks}/events
MSG
}
