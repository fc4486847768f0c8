# Chaos suite: a 3-node NATS cluster (nats-server built from the module), R3 streams, 2
# executors, 2 toolhosts, 2 planners; SIGKILL of each role and a NATS node in turn while sessions
# run. Not part of `make test`; its figures go to docs/benchmarks.md.
.PHONY: chaos
chaos: build
	cd e2e && $(GO) test -tags chaos -run '^TestChaos$$' -count=1 -timeout 40m -v .
