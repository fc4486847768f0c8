# Governance (cancel, budgets): the cancel-latency measurement for docs/benchmarks.md
# (## Cancel). A load run, not part of `make test`.

.PHONY: cancel-bench
cancel-bench:
	cd e2e && SKEIN_CANCEL_BENCH=1 $(GO) test -run='^TestCancelLatencyUnderLoad$$' -v -count=1 -timeout=15m .
