#!/usr/bin/env bash
# make sdk: the client libraries generated from platform/openapi/openapi.json.
#
#   scripts/sdk.sh          regenerates sdk/typescript/src/openapi.ts and sdk/go/client.gen.go
#   scripts/sdk.sh check    generates both into a temporary folder and fails when either
#                           differs from the committed file (openapi.json changed, make sdk not run)
#   scripts/sdk.sh deps     installs sdk/typescript's packages from its lockfile (npm ci), only
#                           when node_modules is missing or was installed from another lockfile
#
# The generators are pinned: openapi-typescript by sdk/typescript/package-lock.json,
# oapi-codegen by the version below (go run fetches and caches that version).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OAPI_CODEGEN=github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2
TS=sdk/typescript
SPEC=platform/openapi/openapi.json

deps() {
  # npm ci leaves a copy of the lockfile it installed from; the same lockfile
  # means nothing to install (and no network).
  if ! cmp -s "$TS/package-lock.json" "$TS/node_modules/.installed-from-lock.json" 2>/dev/null; then
    (cd "$TS" && npm ci --no-audit --no-fund --loglevel=error) >&2
    cp "$TS/package-lock.json" "$TS/node_modules/.installed-from-lock.json"
  fi
}

# generate TS_FILE GO_FILE
generate() {
  deps
  local out
  out=$("$TS/node_modules/.bin/openapi-typescript" "$SPEC" --output "$1" 2>&1) || { echo "$out" >&2; return 1; }
  "$GO" run "$OAPI_CODEGEN" -config sdk/go/oapi-codegen.yaml -o "$2" "$SPEC"
}

case "${1:-generate}" in
generate)
  generate "$TS/src/openapi.ts" sdk/go/client.gen.go
  ;;
check)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  generate "$tmp/openapi.ts" "$tmp/client.gen.go"
  status=0
  for pair in "$TS/src/openapi.ts:$tmp/openapi.ts" "sdk/go/client.gen.go:$tmp/client.gen.go"; do
    committed=${pair%%:*} fresh=${pair#*:}
    if ! diff -u "$committed" "$fresh" > "$tmp/diff"; then
      echo "$committed is not what $SPEC generates: run make sdk and commit the result" >&2
      head -n 40 "$tmp/diff" >&2
      status=1
    fi
  done
  exit "$status"
  ;;
deps)
  deps
  ;;
*)
  echo "usage: scripts/sdk.sh [generate|check|deps]" >&2
  exit 2
  ;;
esac
