// Package sdktest checks the client libraries of sdk/ (part of make test):
// that each is what platform/openapi/openapi.json generates
// (scripts/sdk.sh check), and each one's own tests, their end-to-end flow
// included, against the real service: svc api, svc worker and svc
// simulator run as separate processes on a fresh database, as the HTTP
// benchmark runs them (cmd/svc/clustertest); and the README's way to
// install each client from a checkout, in a project of its own. It needs
// Node.js and npm for the TypeScript client; without npm it is skipped,
// but never in CI.
package sdktest
