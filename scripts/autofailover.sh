#!/usr/bin/env bash
# A pg_auto_failover formation on this machine, for the failover harness
# (TestFailover with FAILOVER_MANAGER=pg_auto_failover, docs/reliability.md):
# a monitor and keeper-managed PostgreSQL nodes, each in a folder of its own
# (DIR: its data in DIR/pg, pg_autoctl's files in DIR/autoctl, the keeper's
# log in DIR/keeper.log); the folders of one formation share a parent, whose
# sock/ holds their Unix sockets. All listen on 127.0.0.1 only, run as the same
# unprivileged user as scripts/db.sh's servers (PostgreSQL and pg_autoctl
# refuse root).
#
#   scripts/autofailover.sh install
#                      install Debian's postgresql-NN-auto-failover (and
#                      PostgreSQL) when pg_autoctl is missing
#   scripts/autofailover.sh monitor DIR PORT
#                      create a monitor (pg_autoctl create monitor), set its
#                      detection settings (below), start it and print the URL
#                      the nodes register with
#   scripts/autofailover.sh node DIR PORT NAME MONITOR_URL
#                      create a node named NAME (pg_autoctl create postgres):
#                      the formation's first node is initialised here
#                      (max_connections 300, shared_buffers 256MB) and becomes
#                      its primary, a later one is a base backup of the
#                      primary and becomes its standby; start its keeper, wait
#                      until the monitor reports it single (a primary alone),
#                      primary or secondary and it answers, and print its
#                      superuser URL
#   scripts/autofailover.sh start DIR
#                      start the keeper (pg_autoctl run, which starts
#                      PostgreSQL) in the background, in a session of its own
#   scripts/autofailover.sh kill DIR
#                      SIGKILL the keeper's session, PostgreSQL included, at
#                      once, as the loss of its host would; wait until every
#                      process of it has exited
#   scripts/autofailover.sh stop DIR
#                      stop the keeper and its PostgreSQL (pg_autoctl stop;
#                      SIGKILL after 30 s)
#
# Detection settings (SVC_PAF_TIMEOUTS=default keeps pg_auto_failover's own,
# given second; docs/deployment.md has the trade-off):
#   monitor  pgautofailover.health_check_period       2 s   (5 s)
#            pgautofailover.health_check_timeout      2 s   (5 s)
#            pgautofailover.health_check_max_retries  2     (2)
#            pgautofailover.health_check_retry_delay  1 s   (2 s)
#            pgautofailover.node_considered_unhealthy_timeout  10 s  (20 s)
#            pgautofailover.primary_demote_timeout    10 s  (30 s)
#   keepers  timeout.network_partition_timeout        5 s   (20 s)
# Messages go to stderr, so that callers can capture what is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "autofailover: $*" >&2; }
. scripts/pg-common.sh

if [ "${SVC_PAF_TIMEOUTS:-}" = default ]; then
  MONITOR_SETTINGS=""
  PARTITION_TIMEOUT=""
else
  MONITOR_SETTINGS="health_check_period=2000 health_check_timeout=2000 health_check_max_retries=2
    health_check_retry_delay=1000 node_considered_unhealthy_timeout=10000 primary_demote_timeout=10000"
  PARTITION_TIMEOUT=5
fi

install() {
  command -v pg_autoctl >/dev/null 2>&1 && return 0
  if ! pgbin >/dev/null; then
    say "no PostgreSQL binaries found; installing Debian's postgresql package"
    apt_install postgresql
  fi
  local major; major=$(basename "$(dirname "$(pgbin)")")
  say "pg_autoctl not found; installing Debian's postgresql-$major-auto-failover package"
  apt_install "postgresql-$major-auto-failover"
}

# autoctl DIR ARGS...: pg_autoctl as the owner, its configuration and state
# kept in DIR/autoctl, reaching its PostgreSQL over TCP as the superuser svc.
autoctl() {
  local dir="$1"; shift
  run_as "$(pg_owner)" env XDG_CONFIG_HOME="$dir/autoctl/config" XDG_DATA_HOME="$dir/autoctl/data" \
    XDG_RUNTIME_DIR="$dir/autoctl/run" PGHOST=127.0.0.1 PGUSER=svc pg_autoctl "$@"
}

# prepare DIR: the folder, owned by the owner and reachable by it.
prepare() {
  local owner; owner=$(pg_owner)
  mkdir -p "$1/autoctl/config" "$1/autoctl/data" "$1/autoctl/run" "$(dirname "$1")/sock"
  grant_traverse "$owner" "$1/pg"
  chown -R "$owner" "$1" "$(dirname "$1")/sock"
}

# init DIR SHARED_BUFFERS: a new cluster in DIR/pg with the superuser svc.
# Its settings go to postgresql.auto.conf, which PostgreSQL reads after the
# settings pg_autoctl writes (these size shared_buffers for the whole
# machine, too much for three servers on one), and which a base backup and
# pg_rewind copy to the other nodes: so the Unix socket folder is one for
# the formation, sock/ beside the nodes' folders (pg_autoctl connects to its
# PostgreSQL through the socket that postmaster.pid names, and starts it
# with no TCP listener for the crash recovery before pg_rewind).
init() {
  local owner; owner=$(pg_owner)
  run_as "$owner" "$(pgbin)/initdb" -D "$1/pg" -U svc --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >> "$1/pg/postgresql.auto.conf" <<CONF
unix_socket_directories = '$(dirname "$1")/sock'
max_connections = 300
shared_buffers = '$2'
CONF
}

psql_at() { # url sql
  "$(pgbin)/psql" "$1" -v ON_ERROR_STOP=1 -Atqc "$2"
}

# start DIR: pg_autoctl run in a session of its own (its process group
# holds the keeper, its services and PostgreSQL: what kill ends).
start() {
  local dir="$1" prefix=()
  [ "$(id -u)" = 0 ] && prefix=(runuser -u "$(pg_owner)" --)
  setsid "${prefix[@]}" env XDG_CONFIG_HOME="$dir/autoctl/config" XDG_DATA_HOME="$dir/autoctl/data" \
    XDG_RUNTIME_DIR="$dir/autoctl/run" PGHOST=127.0.0.1 PGUSER=svc \
    pg_autoctl run --pgdata "$dir/pg" >>"$dir/keeper.log" 2>&1 </dev/null &
  echo $! >"$dir/keeper.pid"
}

# alive PGID: the processes of the group that have not exited (a zombie,
# waiting for init to reap it, has).
alive() {
  local pgid="$1" f line state pgrp out=""
  for f in /proc/[0-9]*/stat; do
    { read -r line <"$f"; } 2>/dev/null || continue
    read -r state _ pgrp _ <<<"${line##*) }"
    [ "$pgrp" = "$pgid" ] && [ "$state" != Z ] && out="$out ${f//[^0-9]/}"
  done
  echo "$out"
}

# wait_gone PGID SECONDS: until no process of the group is alive.
wait_gone() {
  local i
  for i in $(seq $(($2 * 20))); do
    [ -z "$(alive "$1")" ] && return 0
    sleep 0.05
  done
  return 1
}

case "${1:-}" in
install)
  install
  ;;
monitor)
  dir="${2:?usage: scripts/autofailover.sh monitor DIR PORT}"
  port="${3:?usage: scripts/autofailover.sh monitor DIR PORT}"
  install
  prepare "$dir"
  init "$dir" 64MB
  autoctl "$dir" create monitor --pgdata "$dir/pg" --pgport "$port" --hostname 127.0.0.1 \
    --auth trust --no-ssl --pgctl "$(pgbin)/pg_ctl" >>"$dir/keeper.log" 2>&1 \
    || { say "pg_autoctl create monitor failed; its log says:"; tail -n 20 "$dir/keeper.log" >&2; exit 1; }
  # pg_autoctl starts PostgreSQL listening on '*' unless told otherwise.
  autoctl "$dir" config set --pgdata "$dir/pg" postgresql.listen_addresses 127.0.0.1 >/dev/null
  start "$dir"
  url="postgres://svc@127.0.0.1:$port/pg_auto_failover?sslmode=disable"
  for _ in $(seq 600); do psql_at "$url" "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
  for kv in $MONITOR_SETTINGS; do
    psql_at "$url" "ALTER SYSTEM SET pgautofailover.${kv%%=*} = ${kv#*=}"
  done
  psql_at "$url" "SELECT pg_reload_conf()" >/dev/null
  say "monitor started on 127.0.0.1:$port"
  echo "postgres://autoctl_node@127.0.0.1:$port/pg_auto_failover?sslmode=disable"
  ;;
node)
  usage="usage: scripts/autofailover.sh node DIR PORT NAME MONITOR_URL"
  dir="${2:?$usage}"; port="${3:?$usage}"; name="${4:?$usage}"; monitor="${5:?$usage}"
  install
  prepare "$dir"
  # The monitor's tables, read as its superuser.
  admin=$(printf '%s' "$monitor" | sed -E 's#^postgres(ql)?://[^@]*@#postgres://svc@#')
  if [ "$(psql_at "$admin" "SELECT count(*) FROM pgautofailover.node")" = 0 ]; then
    init "$dir" 256MB
  fi
  autoctl "$dir" create postgres --pgdata "$dir/pg" --pgport "$port" --listen 127.0.0.1 --hostname 127.0.0.1 \
    --name "$name" --dbname svc --monitor "$monitor" --auth trust --no-ssl --pgctl "$(pgbin)/pg_ctl" \
    >>"$dir/keeper.log" 2>&1 \
    || { say "pg_autoctl create postgres failed; its log says:"; tail -n 20 "$dir/keeper.log" >&2; exit 1; }
  if [ -n "$PARTITION_TIMEOUT" ]; then
    autoctl "$dir" config set --pgdata "$dir/pg" timeout.network_partition_timeout "$PARTITION_TIMEOUT" >/dev/null
  fi
  start "$dir"
  # The monitor keeps the state pg_autoctl create reported, so PostgreSQL
  # must answer too.
  for _ in $(seq 1200); do
    state=$(psql_at "$admin" "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$name' AND reportedstate = goalstate" 2>/dev/null || true)
    case "$state" in
      single|primary|secondary) psql_at "postgres://svc@127.0.0.1:$port/postgres?sslmode=disable" "SELECT 1" >/dev/null 2>&1 && break ;;
    esac
    sleep 0.1
  done
  case "$state" in
    single|primary|secondary) say "node $name started on 127.0.0.1:$port, $state" ;;
    *) say "node $name not single, primary nor secondary after 120 s; its log says:"; tail -n 20 "$dir/keeper.log" >&2; exit 1 ;;
  esac
  echo "postgres://svc@127.0.0.1:$port/svc?sslmode=disable"
  ;;
start)
  dir="${2:?usage: scripts/autofailover.sh start DIR}"
  start "$dir"
  say "keeper of $dir started"
  ;;
kill)
  dir="${2:?usage: scripts/autofailover.sh kill DIR}"
  pgid=$(cat "$dir/keeper.pid")
  # PostgreSQL runs in the keeper's process group, so one signal ends both.
  kill -9 -- "-$pgid" 2>/dev/null || true
  wait_gone "$pgid" 10 || { say "processes of $dir still alive 10 s after SIGKILL:$(alive "$pgid")"; exit 1; }
  say "killed the keeper and PostgreSQL of $dir"
  ;;
stop)
  dir="${2:?usage: scripts/autofailover.sh stop DIR}"
  [ -f "$dir/keeper.pid" ] || exit 0
  pgid=$(cat "$dir/keeper.pid")
  if [ -n "$(alive "$pgid")" ]; then
    autoctl "$dir" stop --pgdata "$dir/pg" >/dev/null 2>&1 || true
    if ! wait_gone "$pgid" 30; then
      kill -9 -- "-$pgid" 2>/dev/null || true
      wait_gone "$pgid" 10 || true
    fi
  fi
  say "stopped $dir"
  ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
  ;;
esac
