# netproxy — build, test and benchmark.
GO ?= go
CONFORMANCE ?= ../shared/conformance/run.sh

.PHONY: all build test deps lint unit conformance bench fuzz run

all: build

build:
	$(GO) build -o bin/netproxy ./cmd/netproxy
	$(GO) build -o bin/execwrap ./cmd/execwrap

run: build
	./bin/netproxy serve

deps:
	./scripts/install-test-deps.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

conformance:
	@if [ -f $(CONFORMANCE) ]; then bash $(CONFORMANCE) . ; else echo "conformance suite not found at $(CONFORMANCE)"; fi

# Every test: install missing tools, lint, unit + end-to-end tests, conformance.
test: deps lint unit conformance

# The end-to-end load run (test/loadbench) needs wrk: installed when missing.
bench: build
	@command -v wrk >/dev/null 2>&1 || ./scripts/install-test-deps.sh
	$(GO) test -run '^$$' -bench . -benchmem ./hostpolicy/... ./execcore/... ./approvalsvc/... ./metrics/... ./attribution/... ./internal/proxy/... ./internal/webui/... ./cmd/execwrap/ ./sandbox/...
	$(GO) test -run '^$$' -bench 'BareTrue|ExecwrapRunTrue|BwrapTrue' -benchtime 100x ./test/
	$(GO) build -o bin/loadbench ./test/loadbench
	./bin/loadbench -netproxy bin/netproxy
