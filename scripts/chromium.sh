#!/usr/bin/env bash
# Finds Chromium for the browser tests (platform/browsertest), installing
# Debian's chromium package when no Chromium is installed (without the
# packages it only recommends, which add printing, file sharing and desktop
# services a headless browser does not use and double the install; with
# fonts-liberation, the one font of them pages are laid out with), and prints the
# binary's path on its last line. scripts/test.sh runs it beside the other
# tests, then the browser tests with SVC_CHROMIUM set; a browser test run by itself runs it when it
# finds no Chromium. A failed install fails loudly: the browser tests need
# it. Messages go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "chromium: $*" >&2; }

find_chromium() {
  if [ -n "${SVC_CHROMIUM:-}" ] && [ -x "$SVC_CHROMIUM" ]; then echo "$SVC_CHROMIUM"; return 0; fi
  local c
  for c in chromium chromium-browser google-chrome-stable google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}

if bin=$(find_chromium); then
  echo "$bin"
  exit 0
fi
say "no Chromium found; installing Debian's chromium package"
export DEBIAN_FRONTEND=noninteractive
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
# Another installer (a parallel test run) may hold dpkg's lock: wait for it.
apt() { $sudo apt-get -o DPkg::Lock::Timeout=300 "$@" >&2; }
apt update -qq || say "apt-get update failed; installing from the package lists there are"
apt install -y -qq --no-install-recommends chromium fonts-liberation || true
if ! bin=$(find_chromium); then
  say "installing chromium failed: the browser tests cannot run"
  exit 1
fi
say "installed $bin"
echo "$bin"
