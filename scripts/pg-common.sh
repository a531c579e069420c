# Helpers shared by scripts/db.sh and scripts/autofailover.sh (sourced, not
# run): the installed PostgreSQL binaries, the unprivileged user that owns
# the private servers' files (PostgreSQL and pg_autoctl refuse to run as
# root), and Debian's packages installed when missing.

# The newest installed PostgreSQL's bin folder.
pgbin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
  return 1
}

run_as() { # user cmd...
  if [ "$(id -u)" = 0 ]; then
    local u="$1"; shift
    if command -v runuser >/dev/null 2>&1; then runuser -u "$u" -- "$@"; else su "$u" -s /bin/sh -c "$(printf '%q ' "$@")"; fi
  else
    shift; "$@"
  fi
}

# The owner of the private servers' files.
pg_owner() {
  if [ "$(id -u)" = 0 ]; then
    id -u svcpg >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin svcpg
    echo svcpg
  else
    id -un
  fi
}

# A data folder must be reachable by its owner even when it lies under
# root's home: grant traverse (o+x, not read) on each folder above it that
# lacks it, and say so.
grant_traverse() { # owner dir
  [ "$(id -u)" = 0 ] || return 0
  local d="$2"
  while d=$(dirname "$d"); [ "$d" != / ]; do
    if ! run_as "$1" test -x "$d"; then
      chmod o+x "$d" && say "granted traverse permission (o+x) on $d so $1 can reach $2"
    fi
  done
}

# apt_install PACKAGE...: Debian's packages, with sudo when not root.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq "$@" >&2
}
