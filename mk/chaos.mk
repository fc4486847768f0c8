# Chaos suite: a 3-node NATS cluster (nats-server built from the module) with the permission
# matrix, R3 streams, 2 executors, 2 toolhosts, 2 planners, memoryd and the miner with memory on
# (MiniLM, hence memory-setup); SIGKILL of an executor, a toolhost, a planner, memoryd and a NATS
# node in turn while sessions arrive at a steady rate. Not part of `make test` (.ci/run runs it
# after it); its figures go to docs/benchmarks.md. Knobs (environment): SKEIN_CHAOS_RATE (sessions/s, default 1.5),
# SKEIN_CHAOS_TOOL_S (the side-effect tool's wait, default 3),
# SKEIN_CHAOS_CALM_S (calm phase, default 40), SKEIN_CHAOS_GAP_S (between faults, default 30),
# SKEIN_CHAOS_DRAIN_S (how long sessions may run on after the last arrival, default 180),
# SKEIN_CHAOS_FAULTS (which roles or node to kill, in order, default
# executor-1,toolhost-1,planner-1,memoryd,nats-2; a role may be named again).
.PHONY: chaos
chaos: build memory-setup
	cd e2e && $(GO) test -tags chaos -run '^TestChaos$$' -count=1 -timeout 40m -v .
