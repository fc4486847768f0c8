# Soak: continuous short sessions against one `skein up` (scripted model, compiled sum tool,
# memory and miner on) for SOAK_DURATION; reports sessions/s and p50/p99 per minute, every 20 s
# the live heap by holder (the NATS server and parts of it, each role) and the RSS, consumers
# per stream, goroutines, CPU per role and what each stream stores (e2e/soak_test.go). Every
# per-session record is kept SOAK_RETENTION (stream max_age, TTLs, dedup window); after a
# warm-up of the retention plus 2 minutes (at least half the run), the heap, the RSS and each
# holder must stay within 10% of their level then. Not part of `make test`.
#   make soak                          10 minutes, 4 sessions in flight, unpaced, 2-minute retention
#   make soak SOAK_RATE=20             paced at 20 sessions/s
#   make soak SOAK_DURATION=30m        the long run docs/benchmarks.md records
#   make soak SOAK_DURATION=2m SOAK_WORKERS=8
#   make soak SOAK_RETENTION=default   the mesh's own retention (days): memory grows with
#                                      every session retained, so flatness is not checked
# SKEIN_SOAK_HEAP_PROFILE=PATH also saves heap profiles at start (PATH.start) and end (PATH);
# SKEIN_SOAK_WARMUP and SKEIN_SOAK_SAMPLE change the warm-up and the sampling interval;
# SOAK_RATE (SKEIN_SOAK_RATE) paces the run at N sessions/s (0: unpaced, as fast as the workers
# go), so that memory is compared at the same load on a machine whose load changes: unpaced, the
# rate follows the machine's other work, the sessions retained follow the rate and the server's
# memory follows them (28.9 -> 42.8 sessions/s on a shared machine, server +16.8%, nothing
# leaking). CI runs the soak alone, unpaced. Paced at 20/s the heap is smaller and its sampling
# noise a larger part of it: one quiet run failed at +12.1% with the sessions retained flat.

SOAK_DURATION  ?= 10m
SOAK_WORKERS   ?= 4
SOAK_RETENTION ?= 2m
SOAK_RATE      ?= $(or $(SKEIN_SOAK_RATE),0)

.PHONY: soak
soak: build tools-examples
	cd e2e && SKEIN_SOAK_WORKERS=$(SOAK_WORKERS) SKEIN_SOAK_RETENTION=$(SOAK_RETENTION) SKEIN_SOAK_RATE=$(SOAK_RATE) $(GO) test -count=1 -v -run '^TestSoak$$' \
		-timeout 60m . -soak.duration=$(SOAK_DURATION)

# Per-call overhead of a sequential tool call on the mesh vs a bare NATS request/reply between
# two processes, side by side in one run (e2e/overhead_test.go).
.PHONY: bench-overhead
bench-overhead: build tools-examples
	cd e2e && $(GO) test -count=1 -v -run '^TestToolCallOverhead$$' -timeout 30m . -overhead

# Throughput with 1 and then 8 executors on a 1 s I/O-bound tool (e2e/scaling_test.go).
.PHONY: bench-scaling
bench-scaling: build
	cd e2e && $(GO) test -count=1 -v -run '^TestExecutorScaling$$' -timeout 30m . -scaling

# Start-up of a one-step embedded `skein run`, memory on vs off (scripts/bench-start.sh).
.PHONY: bench-start
bench-start: build
	RUNS=$${RUNS:-7} bash scripts/bench-start.sh $(BIN)/skein
