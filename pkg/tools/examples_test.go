package tools_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/tools"
)

// exampleTools loads examples/tools. The Go sum tool runs from the Makefile-built binary when
// it is there, else from a binary this test builds.
func exampleTools(t testing.TB) map[string]*tools.Tool {
	t.Helper()
	dir := filepath.Join(devtest.RepoRoot(t), "examples", "tools")
	ts, err := tools.LoadDirs([]string{dir}, nil)
	if err != nil {
		t.Fatalf("load examples: %v", err)
	}
	m := map[string]*tools.Tool{}
	for _, tl := range ts {
		m[tl.Name] = tl
	}
	if sum := m["sum"]; sum != nil && sum.CheckExecutable() != nil {
		bin := filepath.Join(devtest.SharedDir(t), "sum")
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = filepath.Join(dir, "sum")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build sum: %v\n%s", err, out)
		}
		cp := *sum
		cp.Argv = []string{bin}
		m["sum"] = &cp
	}
	return m
}

func TestExampleToolsRunThroughTheRunner(t *testing.T) {
	ex := exampleTools(t)
	if len(ex) != 3 {
		t.Fatalf("want echo, sum and wordcount, got %d tools", len(ex))
	}
	devtest.NeedProgram(t, "python3")
	devtest.NeedProgram(t, "node")
	cases := []struct {
		tool, args, want string
	}{
		{"echo", `{"text": "héllo", "upper": true}`, `{"length":5,"text":"HÉLLO"}`},
		{"sum", `{"numbers": [0.1, 0.2, 12345678901234567890]}`, `{"count":3,"sum":12345678901234567890.3}`},
		{"wordcount", `{"text": "the cat\nthe hat", "top": 1}`, `{"chars":15,"lines":2,"top":[{"count":2,"word":"the"}],"words":4}`},
	}
	var r tools.Runner
	for _, c := range cases {
		res := r.Run(context.Background(), ex[c.tool], json.RawMessage(c.args))
		if !res.OK {
			t.Errorf("%s: %+v", c.tool, res)
			continue
		}
		if got := canonical(t, res.Result); got != c.want {
			t.Errorf("%s: result %s, want %s", c.tool, got, c.want)
		}
	}
	// The schemas are enforced: sum refuses an empty list before running.
	res := r.Run(context.Background(), ex["sum"], json.RawMessage(`{"numbers": []}`))
	if res.OK || res.Kind != "invalid_arguments" || !strings.Contains(res.Error, "/numbers") {
		t.Errorf("sum with no numbers: %+v", res)
	}
}

func canonical(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// BenchmarkExampleTool measures one runner call per example tool: validation, process start,
// stdin/stdout round trip and interpretation. Interpreter start-up dominates.
func BenchmarkExampleTool(b *testing.B) {
	ex := exampleTools(b)
	args := map[string]string{
		"echo":      `{"text": "hi"}`,
		"sum":       `{"numbers": [1, 2.5]}`,
		"wordcount": `{"text": "a b c"}`,
	}
	for _, name := range []string{"sum", "echo", "wordcount"} {
		b.Run(name, func(b *testing.B) {
			var r tools.Runner
			for i := 0; i < b.N; i++ {
				if res := r.Run(context.Background(), ex[name], json.RawMessage(args[name])); !res.OK {
					b.Fatalf("%+v", res)
				}
			}
		})
	}
}
