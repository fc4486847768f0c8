package devtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"iter"
	"path/filepath"
	"strings"
	"testing"
)

// StructFields parses the Go files of dir, tests aside, and yields every field of every named
// struct type they declare, with the name of its type: for tests that hold a rule over every
// type a package has, including the ones added later.
func StructFields(t testing.TB, dir string) iter.Seq2[string, *ast.Field] {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, file)
	}
	return func(yield func(string, *ast.Field) bool) {
		more := true
		for _, file := range parsed {
			ast.Inspect(file, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !more || !ok {
					return more
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, fl := range st.Fields.List {
						if more = yield(ts.Name.Name, fl); !more {
							return false
						}
					}
				}
				return true
			})
			if !more {
				return
			}
		}
	}
}
