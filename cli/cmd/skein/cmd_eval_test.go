package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
)

func runEval(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runSkein(t, 5*time.Minute, nil, args...)
}

// TestEvalShowsTheLearningCurve runs the shipped pitfalls suite offline on the scripted model,
// memory off and on: round 1 fails where a first attempt fails (two tasks give up, three recover
// after a tool error); with memory on, round 2 succeeds on every task first time because of
// what round 1 taught; with memory off, round 2 is round 1 again.
func TestEvalShowsTheLearningCurve(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two embedded meshes")
	}
	if !minilm.Installed(devenv.ToolsDir()) {
		devtest.Missing(t, "the all-MiniLM-L6-v2 embedder")
	}
	suite := filepath.Join(devtest.RepoRoot(t), "examples", "eval", "pitfalls")
	t.Setenv("SKEIN_HOME", t.TempDir())
	file := filepath.Join(t.TempDir(), "eval.json")
	out, progress, err := runEval(t, "eval", suite, "--rounds", "2", "--out", file)
	if err != nil {
		t.Fatalf("skein eval: %v\n%s\n%s", err, out, progress)
	}
	for _, want := range []string{"suite pitfalls: 5 tasks", "success", "first-try", "learning (the miner's model, memory on)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Under each metric, its memory-off and memory-on columns side by side.
	if !regexp.MustCompile(`\nmemory(\s+off\s+on){7}\n`).MatchString(out) {
		t.Errorf("table has no off|on column pair under each of the 7 metrics:\n%s", out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep evalReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Arms) != 2 || rep.Arms[0].Memory != "off" || rep.Arms[1].Memory != "on" || len(rep.Tasks) != 5 {
		t.Fatalf("report %+v", rep)
	}
	off, on := rep.Arms[0].Rounds, rep.Arms[1].Rounds
	for name, rs := range map[string][]evalRound{"off": off, "on": on} {
		if r := rs[0]; r.Succeeded != 3 || r.FirstTry != 0 || r.ToolFailures != 5 {
			t.Errorf("memory %s, round 1: %d succeeded, %d first try, %d tool failures; want 3, 0, 5 (the first attempts' mistakes)\n%s",
				name, r.Succeeded, r.FirstTry, r.ToolFailures, progress)
		}
	}
	if r := on[1]; r.Succeeded != 5 || r.FirstTry != 5 || r.ToolFailures != 0 {
		t.Errorf("memory on, round 2: %d succeeded, %d first try, %d tool failures; want every task right first time\n%s", r.Succeeded, r.FirstTry, r.ToolFailures, progress)
	}
	if r := off[1]; r.Succeeded != 3 || r.FirstTry != 0 {
		t.Errorf("memory off, round 2: %d succeeded, %d first try; want round 1 again", r.Succeeded, r.FirstTry)
	}
	shown := 0
	for _, res := range on[1].Results {
		shown += res.Guidelines + res.Examples
		if res.ID == "thermostat" && res.Examples == 0 {
			t.Errorf("the thermostat task was shown no worked example in round 2: %+v", res)
		}
	}
	if shown == 0 || on[1].MiningInputTokens == 0 && on[0].MiningInputTokens == 0 {
		t.Errorf("memory on showed nothing (%d) or learning cost nothing", shown)
	}
}

// A suite that cannot be run as written is refused before any mesh starts, with the file and
// the reason.
func TestEvalSuiteRefusesBadTasks(t *testing.T) {
	for name, tc := range map[string]struct {
		tasks map[string]string
		want  string
	}{
		"no check":        {map[string]string{"a.yaml": "id: a\ntask: do it\n"}, "check needs exactly one of answer"},
		"two checks":      {map[string]string{"a.yaml": "id: a\ntask: do it\ncheck: {answer: x, tool: t}\n"}, "check needs exactly one of answer"},
		"bad pattern":     {map[string]string{"a.yaml": "id: a\ntask: do it\ncheck: {answer: '('}\n"}, "check.answer"},
		"duplicate id":    {map[string]string{"a.yaml": "id: a\ntask: one\ncheck: {answer: x}\n", "b.yaml": "id: a\ntask: two\ncheck: {answer: x}\n"}, `task id "a" is also`},
		"unknown field":   {map[string]string{"a.yaml": "id: a\ntask: do it\ncheck: {answer: x}\nexpect: y\n"}, "field expect not found"},
		"missing checker": {map[string]string{"a.yaml": "id: a\ntask: do it\ncheck: {tool: nope}\n"}, "checking tool"},
		"no tasks":        {nil, "no tasks/*.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "suite.yaml"), []byte("name: s\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for f, body := range tc.tasks {
				if err := os.WriteFile(filepath.Join(dir, "tasks", f), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := loadSuite(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("loadSuite: %v; want an error saying %q", err, tc.want)
			}
		})
	}
	if _, _, err := runEval(t, "eval", t.TempDir(), "--rounds", "0"); err == nil || !strings.Contains(err.Error(), "--rounds must be between 1 and") {
		t.Errorf("--rounds 0: %v", err)
	}
}
