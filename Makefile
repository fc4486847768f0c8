# skein: two commands set everything up on a fresh machine.
#   make demo   build, scaffold a demo project, run a task offline on the embedded mesh
#   make test   install what the tests need, then run every module's tests with -race
#
# Each area keeps its own setup in mk/<area>.mk and hooks it into `setup` by adding a
# prerequisite line (`setup: my-setup`); everything installed lands under $(TOOLS).

SHELL := /bin/bash
ROOT  := $(CURDIR)
TOOLS := $(ROOT)/.tools
BIN   := $(ROOT)/bin
GO    ?= go
PY    ?= python3
VENV  := $(TOOLS)/venv
VPY   := $(VENV)/bin/python
NODE_PREFIX := $(TOOLS)/node
MODULES := pkg gateway planner executor toolhost memoryd miner cli e2e
GOTEST_FLAGS ?= -race -count=1 -timeout 20m
# A count, not a duration: a -fuzztime duration can fail a clean run with "context deadline
# exceeded" when it ends (a race in Go 1.26's fuzz coordinator, golang/go#75804, fixed in 1.27).
# 300000 inputs take 15 to 30 s on the 2-core CI machine.
TOON_FUZZTIME ?= 300000x

export SKEIN_REPO_ROOT := $(ROOT)
export SKEIN_TOOLS_DIR := $(TOOLS)

.PHONY: all build setup test vet tidy tidy-check fmt demo clean venv node-prefix

all: build

$(VENV)/.ok:
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	touch $@

venv: $(VENV)/.ok

node-prefix:
	mkdir -p $(NODE_PREFIX)
	test -f $(NODE_PREFIX)/package.json || echo '{"name":"skein-dev-tools","private":true}' > $(NODE_PREFIX)/package.json

include $(sort $(wildcard mk/*.mk))

setup: build

vet:
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

fmt:
	gofmt -l -w $(MODULES)

# Each module's go.mod and go.sum are what `go mod tidy` makes of them with the workspace off, so
# every module builds alone, resolving the others through its own replace directives (the
# service modules require pkg only). tidy-check fails, showing the difference, when one is not.
tidy:
	for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; done

tidy-check:
	@for m in $(MODULES); do \
		(cd $$m && GOWORK=off $(GO) mod tidy -diff) || { echo "tidy-check: $$m/go.mod or go.sum is not tidy; run make tidy" >&2; exit 1; }; \
	done

test: setup vet lint tidy-check
	@echo "== fuzz: TOON decoder, $(TOON_FUZZTIME) inputs"
	@$(MAKE) --no-print-directory toon-fuzz TOON_FUZZTIME=$(TOON_FUZZTIME)
	@set -o pipefail; for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && $(GO) test $(GOTEST_FLAGS) ./...) || exit 1; \
	done

# The offline demo: scaffold a project, run it four times, watch a failure become a guideline.
demo: setup
	bash scripts/demo.sh

clean:
	rm -rf $(BIN) .skein
