# TOON codec (pkg/toon): the reference implementation and the conformance
# fixtures the tests read, pinned, installed from npm under $(NODE_PREFIX).
#
# @toon-format/spec 3.3.2 is the newest spec package the npm registry has;
# its fixtures run with the cases spec 4.0 superseded excluded (listed in
# pkg/toon/conformance_test.go). The 4.0 fixtures live in the spec
# repository at tag v4.0.0: point SKEIN_TOON_SPEC_FIXTURES at a checkout's
# tests/fixtures to run them as well (see docs/toon.md).

TOON_REF_VERSION  := 4.4.0
TOON_SPEC_VERSION := 3.3.2
TOON_STAMP := $(NODE_PREFIX)/.toon-$(TOON_REF_VERSION)-$(TOON_SPEC_VERSION).ok

.PHONY: toon-setup toon-fuzz toon-bench

$(TOON_STAMP): | node-prefix
	npm install --silent --no-audit --no-fund --prefix $(NODE_PREFIX) \
		@toon-format/toon@$(TOON_REF_VERSION) @toon-format/spec@$(TOON_SPEC_VERSION)
	touch $@

toon-setup: node-prefix $(TOON_STAMP)

setup: toon-setup

# Bounded fuzzing of the decoder (`make test` runs 300000 inputs, see the Makefile).
TOON_FUZZTIME ?= 300000x
toon-fuzz:
	cd pkg && $(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(TOON_FUZZTIME) ./toon/

# Token counts and throughput for docs/benchmarks.md (## TOON).
toon-bench: toon-setup
	cd pkg && $(GO) test -run='^TestTokenReport$$' -v -count=1 ./toon/ -toon.report
	cd pkg && $(GO) test -run='^$$' -bench=. -benchtime=2s -count=1 ./toon/
