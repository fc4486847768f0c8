package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/tools"
)

const goodSchema = `{"type": "object", "properties": {"q": {"type": "string"}}}`

func writeManifest(t *testing.T, dir, file, body string) string {
	t.Helper()
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func manifest(name string, extra string) string {
	return `{"name": "` + name + `", "description": "d", "command": ["python3", "./x.py"], "input_schema": ` + goodSchema + extra + `}`
}

func TestLoadFileResolvesCommandAgainstTheManifestFolder(t *testing.T) {
	dir := t.TempDir()
	p := writeManifest(t, dir, "a.json", `{"name": "a", "description": "d",
		"command": ["bin/run", "--flag", "./data.txt", "../up.txt", "plain"],
		"input_schema": `+goodSchema+`, "timeout_s": 2.5, "env": ["API_TOKEN"], "max_output_bytes": 100}`)
	tl, err := tools.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "bin/run"), "--flag", filepath.Join(dir, "data.txt"), filepath.Join(filepath.Dir(dir), "up.txt"), "plain"}
	if strings.Join(tl.Argv, "|") != strings.Join(want, "|") {
		t.Errorf("argv = %q, want %q", tl.Argv, want)
	}
	if tl.Dir != dir || tl.Timeout(0).Seconds() != 2.5 || tl.Env[0] != "API_TOKEN" {
		t.Errorf("got %+v", tl)
	}
	spec := tl.Spec()
	if spec.Name != "a" || spec.Description != "d" || string(spec.InputSchema) != `{"type":"object","properties":{"q":{"type":"string"}}}` {
		t.Errorf("spec = %+v (%s)", spec, spec.InputSchema)
	}

	bare, err := tools.LoadFile(writeManifest(t, dir, "b.json", manifest("b", "")))
	if err != nil {
		t.Fatal(err)
	}
	if bare.Argv[0] != "python3" {
		t.Errorf("bare program name must stay for PATH lookup, got %q", bare.Argv[0])
	}
}

func TestBadManifestsNameTheFileAndTheField(t *testing.T) {
	cases := []struct {
		body string
		want []string // all must appear in the error
	}{
		{manifest("a", `, "colour": "red"`), []string{`field "colour"`, "unknown field"}},
		{manifest("bad name", ""), []string{`field "name"`, "letters, digits"}},
		{manifest("", ""), []string{`field "name"`, "empty"}},
		{manifest("find_tools", ""), []string{`field "name"`, "built-in tool"}},
		{`{"name": "a", "command": ["x"], "input_schema": ` + goodSchema + `}`, []string{`field "description"`, "required"}},
		{`{"name": "a", "description": "d", "input_schema": ` + goodSchema + `}`, []string{`field "command"`, "required"}},
		{`{"name": "a", "description": "d", "command": "python3 x.py", "input_schema": ` + goodSchema + `}`, []string{`field "command"`, "want array"}},
		{`{"name": "a", "description": "d", "command": ["x"]}`, []string{`field "input_schema"`, "required"}},
		{`{"name": "a", "description": "d", "command": ["x"], "input_schema": {"type": "object", "properties": {"p": {"type": "bogus"}}}}`, []string{`field "input_schema"`, "not a valid JSON Schema", "at '/properties/p/type'"}},
		{`{"name": "a", "description": "d", "command": ["x"], "input_schema": {"type": "string"}}`, []string{`field "input_schema"`, `"type": "object"`}},
		{`{"name": "a", "description": "d", "command": ["x"], "input_schema": {"type": "object", "properties": {"p": {"$ref": "file:///etc/passwd"}}}}`, []string{`field "input_schema"`, "must be self-contained"}},
		{manifest("a", `, "timeout_s": "ten"`), []string{`field "timeout_s"`, "want number"}},
		{manifest("a", `, "timeout_s": -1`), []string{`field "timeout_s"`}},
		{manifest("a", `, "env": ["OK_NAME", "1BAD"]`), []string{`field "env[1]"`, `"1BAD"`}},
		{manifest("a", `, "max_output_bytes": -5`), []string{`field "max_output_bytes"`}},
		{`{"name": "a", "description": `, []string{"unexpected end"}},
		{`{"name": "a",, }`, []string{"invalid JSON at line 1"}},
		{`[]`, []string{"must be a JSON object"}},
	}
	for _, c := range cases {
		dir := t.TempDir()
		writeManifest(t, dir, "tool.json", c.body)
		_, err := tools.LoadDirs([]string{dir}, nil)
		if err == nil {
			t.Errorf("%s: loaded without error", c.body)
			continue
		}
		for _, w := range append(c.want, filepath.Join(dir, "tool.json")) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s:\n error %q\n lacks %q", c.body, err, w)
			}
		}
	}
}

func TestLoadDirsReportsEveryBadFileTogether(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, dir, "one.json", manifest("one", `, "x": 1`))
	writeManifest(t, dir, "two.json", manifest("two two", ""))
	writeManifest(t, dir, "fine.json", manifest("fine", ""))
	_, err := tools.LoadDirs([]string{dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "one.json") || !strings.Contains(err.Error(), "two.json") {
		t.Fatalf("want both bad files named, got %v", err)
	}
}

func TestLoadDirsDuplicatesAndAllowList(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeManifest(t, a, "echo.json", manifest("echo", ""))
	writeManifest(t, a, "sum.json", manifest("sum", ""))
	writeManifest(t, b, "wc.json", manifest("wordcount", ""))
	writeManifest(t, b, "notes.txt", "not a manifest")
	writeManifest(t, b, ".hidden.json", "not even JSON")
	if err := os.Mkdir(filepath.Join(b, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, filepath.Join(b, "node_modules"), "package.json", `{"name": "x", "version": "1"}`)

	all, err := tools.LoadDirs([]string{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if names := toolNames(all); names != "echo,sum,wordcount" {
		t.Errorf("all tools = %s", names)
	}
	some, err := tools.LoadDirs([]string{a, b}, []string{"wordcount", "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if names := toolNames(some); names != "echo,wordcount" {
		t.Errorf("enabled tools = %s", names)
	}
	if _, err := tools.LoadDirs([]string{a, b}, []string{"echo", "python_exec"}); err == nil || !strings.Contains(err.Error(), `"python_exec"`) {
		t.Errorf("want an error naming the missing enabled tool, got %v", err)
	}

	c := t.TempDir()
	writeManifest(t, c, "other-echo.json", manifest("echo", ""))
	_, err = tools.LoadDirs([]string{a, c}, nil)
	if err == nil || !strings.Contains(err.Error(), `"echo" is defined twice`) || !strings.Contains(err.Error(), "other-echo.json") {
		t.Errorf("want a duplicate error naming both files, got %v", err)
	}
	if _, err := tools.LoadDirs([]string{filepath.Join(a, "nope")}, nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("want an error naming the missing dir, got %v", err)
	}
}

func toolNames(ts []*tools.Tool) string {
	var n []string
	for _, t := range ts {
		n = append(n, t.Name)
	}
	return strings.Join(n, ",")
}
