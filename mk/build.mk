# Binaries of every role plus the skein CLI.
ROLES := gateway planner executor toolhost memoryd miner

.PHONY: build
build:
	mkdir -p $(BIN)
	for r in $(ROLES); do (cd $$r && $(GO) build -o $(BIN)/$$r ./cmd/$$r) || exit 1; done
	cd cli && $(GO) build -o $(BIN)/skein ./cmd/skein
# ...and the small program tools start through where the host cannot set their limits itself.
	cd pkg && CGO_ENABLED=0 $(GO) build -o $(BIN)/skein-tool-sandbox ./tools/cmd/skein-tool-sandbox
