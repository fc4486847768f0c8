# Soak: continuous short sessions against one `skein up` (scripted model, compiled sum tool,
# memory and miner on) for SOAK_DURATION; reports sessions/s, p50/p99 and live heap per minute,
# consumers per stream, goroutines, RSS, CPU per role and what each stream stores
# (e2e/soak_test.go). Not part of `make test`.
#   make soak                      10 minutes, 4 sessions in flight
#   make soak SOAK_DURATION=2m SOAK_WORKERS=8
# SKEIN_SOAK_HEAP_PROFILE=PATH also saves heap profiles at start (PATH.start) and end (PATH).
# SKEIN_SOAK_RETENTION=2m keeps every per-session record 2 minutes (stream max_age, TTLs, dedup
# window), to show memory levelling off once retention removes as much as arrives.

SOAK_DURATION ?= 10m
SOAK_WORKERS  ?= 4

.PHONY: soak
soak: build tools-examples
	cd e2e && SKEIN_SOAK_WORKERS=$(SOAK_WORKERS) $(GO) test -count=1 -v -run '^TestSoak$$' \
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
