#!/bin/bash
# code-measures.sh [DIR]: the shape of a checkout, as issue 24 measured it: lines of code and of
# tests, function lengths, the cyclomatic and cognitive tail, blind waits in tests and duplicate
# pairs among the test files (`duplicates`, where it is installed). Run it on two checkouts to set
# them side by side: docs/benchmarks.md "Code shape" records its output.
set -euo pipefail
dir=$(cd "${1:-.}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Function lengths: go/ast, one line per function ("lines name").
mkdir -p "$tmp/funclen"
cat > "$tmp/funclen/main.go" <<'GO'
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	_ = filepath.WalkDir(os.Args[1], func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".tools" || d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return nil
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				fmt.Println(fset.Position(fd.End()).Line-fset.Position(fd.Pos()).Line+1, fd.Name.Name)
			}
		}
		return nil
	})
}
GO
printf 'module funclen\n\ngo 1.26\n' > "$tmp/funclen/go.mod"
(cd "$tmp/funclen" && GOWORK=off go build -o "$tmp/funclen.bin" .)
GOBIN="$tmp" GOWORK=off go install github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0
GOBIN="$tmp" GOWORK=off go install github.com/uudashr/gocognit/cmd/gocognit@v1.3.0

cd "$dir"
gofiles() { find . \( -name .tools -o -name node_modules -o -name testdata -o -name .git \) -prune -o -name '*.go' "$@" -print0; }
echo "non-test lines:  $(gofiles -not -name '*_test.go' | xargs -0 cat | wc -l)"
echo "test lines:      $(gofiles -name '*_test.go' | xargs -0 cat | wc -l)"
"$tmp/funclen.bin" . > "$tmp/fl"
echo "functions:       $(wc -l < "$tmp/fl"), mean length $(awk '{s+=$1} END {printf "%.1f", s/NR}' "$tmp/fl"), over 80 lines $(awk '$1>80' "$tmp/fl" | wc -l), over 150 $(awk '$1>150' "$tmp/fl" | wc -l)"
modules=$(for m in */go.mod; do dirname "$m"; done)
"$tmp/gocyclo" -ignore '_test|\.tools|node_modules|testdata' $modules > "$tmp/cy"
"$tmp/gocognit" -ignore '_test|\.tools|node_modules|testdata' $modules > "$tmp/cg" 2>/dev/null || true
echo "cyclomatic:      mean $(awk '{s+=$1} END {printf "%.2f", s/NR}' "$tmp/cy"), over 15 $(awk '$1>15' "$tmp/cy" | wc -l); cognitive over 30 $(awk '$1>30' "$tmp/cg" | wc -l)"
count() { gofiles -name '*_test.go' | xargs -0 grep -hE "$1" | wc -l; }
echo "tests:           time.Sleep $(count 'time\.Sleep\('), time.After $(count 'time\.After\('), tickers $(count 'time\.NewTicker\('), deadline loops $(count 'deadline :?= time\.Now\(\)\.Add|time\.Now\(\)\.Before\('), pkg/poll calls $(count 'poll\.(Eventually|True|Wait|Quiet|Receive)')"
if command -v duplicates >/dev/null; then
	mkdir -p "$tmp/tests"
	git ls-files '*_test.go' | while read -r f; do mkdir -p "$tmp/tests/$(dirname "$f")"; cp "$f" "$tmp/tests/$f"; done
	echo "test duplicates: $(cd "$tmp/tests" && duplicates --seconds 120 --most 1 | head -1)"
fi
