# netproxy — build, test and benchmark.
GO ?= go
CONFORMANCE ?= ../shared/conformance/run.sh

.PHONY: all build test deps lint unit conformance bench bench-peers fuzz run soak cluster-demo

all: build

build:
	$(GO) build -o bin/netproxy ./cmd/netproxy
	$(GO) build -o bin/execwrap ./cmd/execwrap

run: build
	./bin/netproxy serve

# Redis, three replicas with a generated cluster key and HAProxy in front
# (TCP, round-robin) on 127.0.0.1; prints how to use it, Ctrl-C stops it
# (docs/cluster.md "Try it: make cluster-demo"). Needs redis-server and
# haproxy (scripts/install-test-deps.sh).
cluster-demo: build
	./scripts/cluster-demo.sh

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

# The peer bench (issue 14; not part of `make test`): installs Squid, Dante
# and wrk from Debian when missing (their system services are left stopped),
# then test/loadbench -peers runs the same workloads, interleaved round by
# round, directly, through a bare splice relay, Squid, Dante (SOCKS5), a
# proxy on the goproxy library alone and netproxy (audit, metrics and the
# local guard on): keep-alive and new-connection req/s with wrk, added
# latency of one connection, 1 GiB CONNECT/SOCKS5 tunnels with the proxy
# tree's CPU s/GiB, and KiB per idle tunnel (Pss of the proxy's process tree
# over 5 000 tunnels). Its interception part (issue 29; squid-openssl and
# mitmproxy installed too) takes one HTTPS origin directly, through
# netproxy's opaque tunnel, and intercepted by Squid ssl-bump, mitmdump and
# netproxy (a request-rule host), every connection proven intercepted or
# not: keep-alive req/s, 8 MiB MB/s, latency, KiB per idle connection, cold
# and warm handshakes. Proxy alone on CPU 1, client and origin on CPU 0.
# Prints markdown tables and netproxy's targets; fails when a measurement
# fails. BENCH_PEERS_FLAGS=-quick for a short development run, -only
# keepalive,newconn,latency,tunnel,idle,interception for parts.
# docs/BENCHMARKS.md.
BENCH_PEERS_FLAGS ?=
bench-peers: build
	./scripts/install-test-deps.sh --bench-peers
	$(GO) build -o bin/loadbench ./test/loadbench
	./bin/loadbench -peers -netproxy bin/netproxy $(BENCH_PEERS_FLAGS)

# The soak (issue 12; not part of `make test`): SOAK_CONNS concurrent
# connections of mixed traffic for SOAK_DURATION against the real binary;
# fails on growth after the warm-up, a lost or corrupted response, or a p99
# blow-up. Results: docs/BENCHMARKS.md.
SOAK_CONNS ?= 10000
SOAK_DURATION ?= 10m
soak: build
	$(GO) build -o bin/soak ./test/soak
	./bin/soak -netproxy bin/netproxy -conns $(SOAK_CONNS) -duration $(SOAK_DURATION)

# Every fuzz target for FUZZTIME (default 10m) each, two at a time.
fuzz:
	./scripts/fuzz-all.sh
