#!/usr/bin/env bash
# Finds a PostgreSQL server for make run and make test, or starts a private
# one, and prints the DATABASE_URL to use on its last line.
#
#   scripts/db.sh          ensure a server; print its URL last
#   scripts/db.sh stop     stop the private server, if this script started one
#   scripts/db.sh restart  restart the private server at once (pg_ctl -m
#                          immediate: a crash as far as clients can tell), for
#                          fault tests
#   scripts/db.sh crash    stop the private server at once (pg_ctl -m
#                          immediate); scripts/db.sh starts it again
#   scripts/db.sh roles URL
#                          with URL a superuser's: create the schema owner
#                          (svc_owner) and the runtime role (svc_app) when
#                          missing, give the owner URL's database and every
#                          object in its public schema to the owner, take
#                          TEMPORARY on the database from PUBLIC and svc_app,
#                          and print
#                          the owner's URL, then the runtime role's
#                          (docs/operations.md)
#   scripts/db.sh standby PRIMARY_PORT NAME [APPLY_DELAY]
#                          make $SVC_PG_DATA a streaming standby of the
#                          private server on PRIMARY_PORT (pg_basebackup -R),
#                          reporting as application_name NAME, replaying
#                          APPLY_DELAY (recovery_min_apply_delay, e.g. 2s)
#                          behind, and start it
#   scripts/db.sh rebuild PRIMARY_PORT NAME [APPLY_DELAY]
#                          turn the stopped or killed private server into a
#                          standby of PRIMARY_PORT, as standby does: pg_rewind
#                          (it needs wal_log_hints, which SVC_PG_REPLICATION
#                          sets), or a new base backup when that fails;
#                          print which (pg_rewind or pg_basebackup), then the URL
#   scripts/db.sh promote  promote the private standby (pg_ctl promote)
#   scripts/db.sh kill     SIGKILL the private server's postmaster, as a lost
#                          host would; wait for its children to notice and
#                          exit (those still there after 10s are killed too)
#
# SVC_PG_REPLICATION=1 when a private cluster is created sets it up to be a
# replication primary: wal_log_hints (for pg_rewind) and WAL kept for
# standbys that fall behind.
#
# Order: $DATABASE_URL if it answers; otherwise a private server under
# $SVC_PG_DATA (default .data/pg, git-ignored) on port $SVC_PG_PORT (default
# 55432), created with
# the installed PostgreSQL binaries as an unprivileged user (initdb refuses
# root); Debian's postgresql package is installed first when no binaries
# exist. Messages go to stderr so callers can capture the URL.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DATA="${SVC_PG_DATA:-$ROOT/.data/pg}"
PORT="${SVC_PG_PORT:-55432}"
DBNAME=svc
say() { echo "db: $*" >&2; }
. scripts/pg-common.sh

answers() { # url
  if command -v psql >/dev/null 2>&1; then
    PGCONNECT_TIMEOUT=3 psql "$1" -Atqc 'select 1' >/dev/null 2>&1
  else
    local bin; bin=$(pgbin) || return 1
    PGCONNECT_TIMEOUT=3 "$bin/psql" "$1" -Atqc 'select 1' >/dev/null 2>&1
  fi
}

# The settings that are this server's own, not its primary's: a base backup
# and pg_rewind copy the source's configuration files, so they are
# rewritten after either.
own_settings() { # primary_port name delay
  local auto="$DATA/postgresql.auto.conf"
  touch "$auto"
  grep -Ev '^(port|primary_conninfo|recovery_min_apply_delay|synchronous_standby_names|synchronous_commit) ' "$auto" > "$auto.new" || true
  cat >> "$auto.new" <<CONF
port = $PORT
primary_conninfo = 'host=127.0.0.1 port=$1 user=svc application_name=$2'
recovery_min_apply_delay = '${3:-0}'
synchronous_standby_names = ''
CONF
  mv "$auto.new" "$auto"
  touch "$DATA/standby.signal"
  rm -f "$DATA/server.log" "$DATA/postmaster.pid" "$DATA/postmaster.opts"
  chown -R "$(pg_owner)" "$DATA"
}

start_standby() {
  local owner; owner=$(pg_owner)
  if ! run_as "$owner" "$(pgbin)/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 120 start >/dev/null; then
    say "the standby did not start; its log says:"
    tail -n 20 "$DATA/server.log" >&2
    exit 1
  fi
}

base_backup() { # primary_port
  local bin owner; bin=$(pgbin); owner=$(pg_owner)
  rm -rf "$DATA"
  mkdir -p "$DATA"
  grant_traverse "$owner" "$DATA"
  chown "$owner" "$DATA"
  chmod 700 "$DATA"
  run_as "$owner" "$bin/pg_basebackup" -h 127.0.0.1 -p "$1" -U svc -D "$DATA" -X stream -c fast -R >&2
}

if [ "${1:-}" = standby ]; then
  pport="${2:?usage: scripts/db.sh standby PRIMARY_PORT NAME [APPLY_DELAY]}"
  name="${3:?usage: scripts/db.sh standby PRIMARY_PORT NAME [APPLY_DELAY]}"
  base_backup "$pport"
  own_settings "$pport" "$name" "${4:-0}"
  start_standby
  say "standby $name of port $pport started on 127.0.0.1:$PORT"
  echo "postgres://svc@127.0.0.1:$PORT/$DBNAME?sslmode=disable"
  exit 0
fi

if [ "${1:-}" = rebuild ]; then
  pport="${2:?usage: scripts/db.sh rebuild PRIMARY_PORT NAME [APPLY_DELAY]}"
  name="${3:?usage: scripts/db.sh rebuild PRIMARY_PORT NAME [APPLY_DELAY]}"
  bin=$(pgbin); owner=$(pg_owner)
  run_as "$owner" "$bin/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true
  # pg_rewind reads the source's timeline from its control file, which a
  # promoted server updates at its first checkpoint.
  "$bin/psql" "postgres://svc@127.0.0.1:$pport/postgres?sslmode=disable" -Atqc checkpoint >/dev/null
  rm -f "$DATA/standby.signal"
  log=$(mktemp)
  if run_as "$owner" "$bin/pg_rewind" -D "$DATA" --source-server="host=127.0.0.1 port=$pport user=svc dbname=postgres" >"$log" 2>&1; then
    say "rewound $DATA from port $pport"
    how=pg_rewind
  else
    how=pg_basebackup
    say "pg_rewind failed ($(tail -n 1 "$log")); taking a new base backup"
    base_backup "$pport"
  fi
  rm -f "$log"
  own_settings "$pport" "$name" "${4:-0}"
  start_standby
  say "rebuilt $name as a standby of port $pport on 127.0.0.1:$PORT"
  echo "$how"
  echo "postgres://svc@127.0.0.1:$PORT/$DBNAME?sslmode=disable"
  exit 0
fi

if [ "${1:-}" = promote ]; then
  owner=$(pg_owner)
  run_as "$owner" "$(pgbin)/pg_ctl" -D "$DATA" -w -t 60 promote >/dev/null
  say "promoted the standby in $DATA"
  exit 0
fi

if [ "${1:-}" = kill ]; then
  pid=$(head -n 1 "$DATA/postmaster.pid")
  children=$(pgrep -P "$pid" || true)
  kill -9 "$pid"
  # A child that has exited stays a zombie until init reaps it: gone.
  for _ in $(seq 200); do
    alive=""
    for c in $children; do
      state=""
      { read -r _ _ state _ < "/proc/$c/stat"; } 2>/dev/null || true
      [ -n "$state" ] && [ "$state" != Z ] && alive="$alive $c"
    done
    [ -z "$alive" ] && break
    sleep 0.05
  done
  for c in $alive; do kill -9 "$c" 2>/dev/null || true; done
  say "killed the postmaster $pid of $DATA"
  exit 0
fi

if [ "${1:-}" = stop ]; then
  if [ -f "$DATA/PG_VERSION" ]; then
    bin=$(pgbin)
    owner=$(stat -c %U "$DATA")
    run_as "$owner" "$bin/pg_ctl" -D "$DATA" -m fast stop >&2 || true
  else
    say "no private server under .data/pg"
  fi
  exit 0
fi

if [ "${1:-}" = crash ]; then
  bin=$(pgbin)
  owner=$(stat -c %U "$DATA")
  run_as "$owner" "$bin/pg_ctl" -D "$DATA" -m immediate -w -t 60 stop >/dev/null
  say "stopped the private server in $DATA at once"
  exit 0
fi

if [ "${1:-}" = roles ]; then
  url="${2:?usage: scripts/db.sh roles URL}"
  if command -v psql >/dev/null 2>&1; then PSQL=psql; else PSQL="$(pgbin)/psql"; fi
  db=$(printf '%s' "$url" | sed -E 's#^postgres(ql)?://[^/]*/([^?]*).*#\2#')
  "$PSQL" "$url" -v ON_ERROR_STOP=1 -Atq >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'svc_owner') THEN
    CREATE ROLE svc_owner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'svc_app') THEN
    CREATE ROLE svc_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
  END IF;
END \$\$;
ALTER DATABASE "$db" OWNER TO svc_owner;
-- No temporary tables for the runtime role (svc migrate revokes it too;
-- docs/operations.md).
REVOKE TEMPORARY ON DATABASE "$db" FROM PUBLIC, svc_app;
-- A database migrated before the roles were split: its objects move to
-- the owner (the functions too, so later migrations may replace them).
DO \$\$ DECLARE r record; BEGIN
  FOR r IN SELECT format('ALTER %s %s OWNER TO svc_owner',
                         CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, c.oid::regclass) AS stmt
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S', 'v') AND pg_get_userbyid(c.relowner) <> 'svc_owner'
              AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
  LOOP EXECUTE r.stmt; END LOOP;
  FOR r IN SELECT format('ALTER FUNCTION %s OWNER TO svc_owner', p.oid::regprocedure) AS stmt
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> 'svc_owner'
  LOOP EXECUTE r.stmt; END LOOP;
  FOR r IN SELECT format('ALTER TYPE %s OWNER TO svc_owner', t.oid::regtype) AS stmt
             FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
            WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd') AND pg_get_userbyid(t.typowner) <> 'svc_owner'
  LOOP EXECUTE r.stmt; END LOOP;
END \$\$;
SQL
  # The URLs carry no password: the private server trusts local
  # connections; elsewhere, give the roles passwords and set the URLs by hand.
  with_user() { # url role
    case "$1" in
      *://*@*) printf '%s\n' "$1" | sed -E "s#^(postgres(ql)?://)[^@/]*@#\\1$2@#" ;;
      *) printf '%s\n' "$1" | sed -E "s#^(postgres(ql)?://)#\\1$2@#" ;;
    esac
  }
  with_user "$url" svc_owner
  with_user "$url" svc_app
  exit 0
fi

if [ "${1:-}" = restart ]; then
  bin=$(pgbin)
  owner=$(stat -c %U "$DATA")
  run_as "$owner" "$bin/pg_ctl" -D "$DATA" -l "$DATA/server.log" -m immediate -w -t 60 restart >/dev/null
  say "restarted the private server in $DATA"
  exit 0
fi

if [ -n "${DATABASE_URL:-}" ]; then
  if answers "$DATABASE_URL"; then
    say "using DATABASE_URL (it answers)"
    echo "$DATABASE_URL"
    exit 0
  fi
  say "DATABASE_URL does not answer; starting a private server instead"
fi

URL="postgres://svc@127.0.0.1:$PORT/$DBNAME?sslmode=disable"
if answers "$URL"; then
  say "private server already running on port $PORT (stop it with: scripts/db.sh stop)"
  echo "$URL"
  exit 0
fi

if ! bin=$(pgbin); then
  say "no PostgreSQL binaries found; installing Debian's postgresql package"
  apt_install postgresql
  bin=$(pgbin)
fi

owner=$(pg_owner)
mkdir -p "$ROOT/.data"
grant_traverse "$owner" "$DATA"
if [ ! -f "$DATA/PG_VERSION" ]; then
  say "initialising a private cluster in .data/pg (owner $owner)"
  mkdir -p "$DATA"
  chown "$owner" "$DATA" 2>/dev/null || true
  chmod 700 "$DATA"
  run_as "$owner" "$bin/initdb" -D "$DATA" -U svc --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >> "$DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = ''
max_connections = 300
shared_buffers = 256MB
fsync = on
CONF
  if [ -n "${SVC_PG_REPLICATION:-}" ]; then
    cat >> "$DATA/postgresql.conf" <<CONF
wal_log_hints = on
wal_keep_size = 512MB
CONF
  fi
fi
say "starting the private server on 127.0.0.1:$PORT"
if ! run_as "$owner" "$bin/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 start >/dev/null; then
  say "the private server did not start; its log says:"
  tail -n 5 "$DATA/server.log" >&2
  say "(another server on port $PORT? set SVC_PG_PORT, or point DATABASE_URL at a server)"
  exit 1
fi
"$bin/psql" "postgres://svc@127.0.0.1:$PORT/postgres?sslmode=disable" -Atqc "select 1 from pg_database where datname='$DBNAME'" | grep -q 1 \
  || "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U svc "$DBNAME"
say "started; stop it with: scripts/db.sh stop"
echo "$URL"
