# Example tools (examples/tools): the Go `sum` tool is compiled; echo (Python) and wordcount
# (Node) need only their interpreters. `sum` is its own dependency-free module, built with
# GOWORK=off because it is not part of the workspace: a tool never links against skein.

SUM_DIR := examples/tools/sum
SUM_BIN := $(SUM_DIR)/sum

.PHONY: tools-examples

tools-examples: $(SUM_BIN)

$(SUM_BIN): $(SUM_DIR)/main.go $(SUM_DIR)/go.mod
	cd $(SUM_DIR) && GOWORK=off $(GO) build -trimpath -o sum .

setup: tools-examples
