package bus_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// The two rules of errors on the wire, held over every Go source file of the repository (tests
// aside): a role answers an error only through the helpers of reply.go, which take the status
// from the error's code, never a status of its own; and no caller classifies an error by its
// text. A new violation fails here, naming the file and line.

// replyHelpers is the one file that may set the service error headers.
const replyHelpers = "pkg/bus/reply.go"

// textMatches are the places that read an error's text, each an error from outside skein that
// carries nothing else to decide on: file and how many matches it holds.
var textMatches = map[string]int{
	"pkg/bus/options.go":                    1, // the NATS server's asynchronous permission error is text (nats.go wraps only some)
	"pkg/bus/denied.go":                     1, // the subject a permission violation names is only in the server's text
	"pkg/tools/manifest.go":                 2, // encoding/json has no type for an unknown field
	"pkg/protocol/codec.go":                 2, // msgpack's and encoding/json's messages shown to people without their package prefix (nothing decides on them)
	"pkg/memory/milvusstore/milvusstore.go": 2, // Milvus's SDK says "already exists" in text only
	"pkg/memory/storetest/storetest.go":     2, // a test suite checking what a store tells people
}

// textMatch finds an error's text (err.Error(), a reply's Error field) compared or searched.
var textMatch = []*regexp.Regexp{
	regexp.MustCompile(`strings\.(Contains|HasPrefix|HasSuffix|EqualFold|Index|TrimPrefix|Cut)\w*\([^\n]*\.Error(\(\)|\b)`),
	regexp.MustCompile(`\.Error\(\)\s*(==|!=)`),
	regexp.MustCompile(`(==|!=)\s*[\w.]+\.Error\(\)`),
	regexp.MustCompile(`\.(Match|Find)\w*\([^\n]*\.Error\(\)`),
	regexp.MustCompile(`\.Error\s*(==|!=)\s*"[^"]`),
}

func TestNoErrorOnTheWireBypassesItsCode(t *testing.T) {
	root := devtest.RepoRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".tools", "node_modules", "testdata", "vendor", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if rel != replyHelpers {
			for _, p := range statusesChosenByHand(t, rel, src) {
				t.Errorf("%s: an error status chosen by hand (%s): answer through bus.Respond or bus.ReplyMsg, which take it from the error's code", rel, p)
			}
		}
		hits := textMatchesIn(src)
		if len(hits) != textMatches[rel] {
			t.Errorf("%s: %d places read an error's text, %d allowed (textMatches): decide by protocol.CodeOf, not by text; %v",
				rel, len(hits), textMatches[rel], hits)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 200 {
		t.Fatalf("scanned %d Go files; the walk is broken", files)
	}
}

// The checks find what they are for: the code that answered memoryd's refusals and classified
// them by text before the codes.
func TestTheWireScanFindsWhatItLooksFor(t *testing.T) {
	old := `package x
func h(req micro.Request, err error, msg string) {
	_ = req.Error("503", "memoryd shutting down", nil)
	_ = req.Error(code.ServiceCode(), err.Error(), nil)
	h := nats.Header{micro.ErrorCodeHeader: []string{"404"}}
	log.Error("a log line", "err", err)
	if strings.Contains(msg, memory.ErrNotFound.Error()) {}
	if rep.Error == "memory entry not found" {}
}`
	if got := statusesChosenByHand(t, "x.go", []byte(old)); len(got) != 3 {
		t.Errorf("found %v, want the two req.Error calls and the header", got)
	}
	if got := textMatchesIn([]byte(old)); len(got) != 2 {
		t.Errorf("found %v, want the two text matches", got)
	}
}

// statusesChosenByHand finds micro Request.Error calls whose status is a literal or picked from a
// code by the caller, and service error headers set by hand.
func statusesChosenByHand(t *testing.T, name string, src []byte) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Error" || len(n.Args) < 3 {
				return true // a Go error's Error() takes nothing; micro's takes a status, a reason and data
			}
			if status(n.Args[0]) {
				out = append(out, fmt.Sprintf("line %d", fset.Position(n.Pos()).Line))
			}
		case *ast.KeyValueExpr:
			if s, ok := n.Key.(*ast.SelectorExpr); ok && (s.Sel.Name == "ErrorCodeHeader" || s.Sel.Name == "ErrorHeader") {
				out = append(out, fmt.Sprintf("line %d: header %s", fset.Position(n.Pos()).Line, s.Sel.Name))
			}
		}
		return true
	})
	return out
}

// status reports whether e is an HTTP status as a string: a literal of three digits, or a call
// of ServiceCode.
func status(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(e.Value)
		return err == nil && regexp.MustCompile(`^\d{3}$`).MatchString(s)
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "ServiceCode"
	case *ast.SelectorExpr:
		return strings.HasPrefix(e.Sel.Name, "ServiceErr")
	}
	return false
}

func textMatchesIn(src []byte) []string {
	var out []string
	for i, line := range strings.Split(string(src), "\n") {
		for _, re := range textMatch {
			if re.MatchString(line) {
				out = append(out, fmt.Sprintf("line %d", i+1))
				break
			}
		}
	}
	return out
}
