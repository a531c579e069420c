.DEFAULT_GOAL := help
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_\/-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/svc
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/svc ./cmd/svc

.PHONY: run
run: build ## Run everything locally: database, simulator, migrations, API and worker (Ctrl-C stops it)
	@scripts/run.sh

# The tests mostly wait (on PostgreSQL's commits, on polls of asynchronous
# work) rather than compute, so eight of a package's parallel tests run at
# once: `go test -race -count=1 -parallel 8 ./modules/deposit/` takes 28-38 s
# on two cores, 50-68 s with the default of GOMAXPROCS (2).
TEST_PARALLEL ?= 8

.PHONY: test
test: ## Run the whole suite against a real PostgreSQL (-race but for the harnesses of separate processes: scripts/test.sh)
	@GO=$(GO) TEST_PARALLEL=$(TEST_PARALLEL) scripts/test.sh

.PHONY: bench
bench: ## Run the benchmarks (results: docs/performance.md)
	@url=$$(scripts/db.sh) && DATABASE_URL="$$url" scripts/bench.sh

.PHONY: bench-scale
bench-scale: ## The ledger at 100k and 10M postings only (LEDGER_SCALE_POSTINGS; docs/performance.md)
	@url=$$(scripts/db.sh) && DATABASE_URL="$$url" BENCH_PACKAGES=./modules/ledger/ BENCH_FILTER=BenchmarkLedgerScale PGBENCH_CLIENTS=32 PGBENCH_SECONDS=10 scripts/bench.sh

.PHONY: bench-scale-drop
bench-scale-drop: ## Drop the generated books the scale benchmark keeps between runs
	@url=$$(scripts/db.sh) && for d in $$(psql "$$url" -Atc "SELECT datname FROM pg_database WHERE starts_with(datname, 'svc_keep_')"); do \
		echo "dropping $$d"; psql "$$url" -qc "DROP DATABASE IF EXISTS $$d WITH (FORCE)"; done

.PHONY: bench-http
bench-http: ## Load benchmark of the real binaries over HTTP, with pgbench as the reference (docs/performance.md)
	@url=$$(scripts/db.sh) && DATABASE_URL="$$url" BENCH_PACKAGES=./cmd/svc/httpbench/ PGBENCH_CLIENTS=32 PGBENCH_SECONDS=10 scripts/bench.sh

CHAOS_DURATION ?= 30m
CHAOS_FAULT_PAUSE ?= 3s

.PHONY: chaos
chaos: ## Fault-injection run of the real binaries (CHAOS_DURATION, CHAOS_SEED to replay; docs/reliability.md)
	@url=$$(scripts/db.sh) && DATABASE_URL="$$url" CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_FAULT_PAUSE=$(CHAOS_FAULT_PAUSE) \
		CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -v -timeout 0 -run '^TestChaos$$' ./cmd/svc/chaos/

FAILOVER_COUNT ?= 10
FAILOVER_SYNC_COMMIT ?= on
# pg_auto_failover: a monitor detects the primary's loss and promotes the
# standby (installed when missing); manual: the harness promotes at once.
FAILOVER_MANAGER ?= pg_auto_failover
# tuned (scripts/autofailover.sh), or default: pg_auto_failover's own.
FAILOVER_PAF_TIMEOUTS ?= tuned

.PHONY: failover
failover: ## PostgreSQL failover under load: the primary's host lost FAILOVER_COUNT times under FAILOVER_MANAGER (pg_auto_failover, or manual), failing back and forth (docs/reliability.md)
	@url=$$(scripts/db.sh) && DATABASE_URL="$$url" FAILOVER_COUNT=$(FAILOVER_COUNT) FAILOVER_SYNC_COMMIT=$(FAILOVER_SYNC_COMMIT) \
		FAILOVER_MANAGER=$(FAILOVER_MANAGER) FAILOVER_PAF_TIMEOUTS=$(FAILOVER_PAF_TIMEOUTS) \
		CHAOS_SEED=$(CHAOS_SEED) $(GO) test -count=1 -v -timeout 0 -run '^TestFailover$$' ./cmd/svc/chaos/

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

.PHONY: openapi-check
openapi-check: ## Check openapi.json: the document itself, then every route against it
	@url=$$(scripts/db.sh) && DATABASE_URL="$$url" $(GO) test -count=1 ./platform/openapi/... && \
		DATABASE_URL="$$url" $(GO) test -count=1 -run '^TestRoutesMatchTheDocument$$' ./cmd/svc/app/

.PHONY: db-stop
db-stop: ## Stop the private PostgreSQL server started by make run/test
	@scripts/db.sh stop

.PHONY: sdk
sdk: ## Regenerate the client libraries (sdk/typescript, sdk/go) from openapi.json
	@GO=$(GO) scripts/sdk.sh
