# Binaries of every role plus the skein CLI.
ROLES := gateway planner executor toolhost memoryd miner
# `skein --version`: the nearest tag and the commits since, or the commit (-dirty with local
# changes); override with `make build VERSION=v1.2.3` (a tarball without .git has no history).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# More linker flags for skein: its -ldflags replace any that GOFLAGS gives (the image's build
# stage passes -s, which GOFLAGS gives the other binaries).
CLI_LDFLAGS ?=

.PHONY: build
build:
	mkdir -p $(BIN)
	for r in $(ROLES); do (cd $$r && $(GO) build -o $(BIN)/$$r ./cmd/$$r) || exit 1; done
	cd cli && $(GO) build -ldflags "$(CLI_LDFLAGS) -X main.version=$(VERSION)" -o $(BIN)/skein ./cmd/skein
# ...and the small program tools start through where the host cannot set their limits itself.
	cd pkg && CGO_ENABLED=0 $(GO) build -o $(BIN)/skein-tool-sandbox ./tools/cmd/skein-tool-sandbox
