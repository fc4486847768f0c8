# Chaos suite: a 3-node NATS cluster (nats-server built from the module) with the permission
# matrix, R3 streams, 2 executors, 2 toolhosts, 2 planners, memoryd and the miner with memory on
# (MiniLM, hence memory-setup); SIGKILL of an executor, a toolhost, a planner, memoryd and a NATS
# node in turn while sessions arrive at a steady rate. Then the disk-full scenario (chaos-disk).
# Not part of `make test` (.ci/run runs it after it); its figures go to docs/benchmarks.md. Knobs
# (environment): SKEIN_CHAOS_RATE (sessions/s, default 1.5),
# SKEIN_CHAOS_TOOL_S (the side-effect tool's wait, default 3),
# SKEIN_CHAOS_CALM_S (calm phase, default 40), SKEIN_CHAOS_GAP_S (between faults, default 30),
# SKEIN_CHAOS_DRAIN_S (how long sessions may run on after the last arrival, default 180),
# SKEIN_CHAOS_FAULTS (which roles or node to kill, in order, default
# executor-1,toolhost-1,planner-1,memoryd,nats-2; a role may be named again).
.PHONY: chaos chaos-disk
chaos: build memory-setup
	cd e2e && $(GO) test -tags chaos -run '^TestChaos(DiskFull)?$$' -count=1 -timeout 60m -v .

# The disk-full scenario alone: `skein up` with $SKEIN_HOME on a tmpfs the test mounts (it needs
# root; it is skipped, saying why, where mounting is not allowed), one more executor and toolhost
# joining it, sessions arriving over HTTP; the tmpfs is filled to its last byte, kept full, then
# freed. More knobs: SKEIN_CHAOS_FULL_S (how long the disk stays full, default 60),
# SKEIN_CHAOS_AFTER_S (arrivals after it is freed, default 30), SKEIN_CHAOS_DISK_MIB (the tmpfs,
# default 64), SKEIN_CHAOS_RESERVE_MIB (mesh.storage_reserve, default 8).
chaos-disk: build memory-setup
	cd e2e && $(GO) test -tags chaos -run '^TestChaosDiskFull$$' -count=1 -timeout 30m -v .
