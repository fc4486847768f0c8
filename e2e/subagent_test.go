package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Sub-agents as a user meets them: several agents, one file each, served by one `skein run`.

const parallelBossScript = `rules:
  - when: {last: "(?s)(Paris.*Rome|Rome.*Paris)"}
    reply: {text: "Paris and Rome."}
  - when: {last: "(?i)capitals"}
    reply:
      tool_calls:
        - {name: geographer, args: {country: France}}
        - {name: geographer, args: {country: Italy}}
`

const geographerScript = `rules:
  - when: {last: "France"}
    reply: {text: "Paris"}
  - when: {last: "Italy"}
    reply: {text: "Rome"}
`

// writeFiles writes name → body into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An embedded `skein run` given two --config serves both agents; with one executor place per
// agent, a parent that calls two children at once completes (the parent waits without its
// place, the children take turns on theirs), and the tree shows both children.
func TestSubagentEmbeddedRunServesChildrenOnOnePlace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	dir := reachableTempDir(t)
	env := cliEnv(t, filepath.Join(dir, "home"))
	writeFiles(t, dir, map[string]string{
		"boss.yaml": "agent: {name: boss}\nllm: {provider: scripted, model: scripted, script: boss.script.yaml}\n" +
			"tools: {agents: [geographer], max_parallel: 2}\nexecutor: {concurrency: 1}\nmemory: {enabled: false}\nminer: {enabled: false}\n",
		"boss.script.yaml": parallelBossScript,
		"geographer.yaml": "agent:\n  name: geographer\n  description: Names the capital of one country.\n" +
			"  input_schema: {type: object, properties: {country: {type: string}}, required: [country], additionalProperties: false}\n" +
			"llm: {provider: scripted, model: scripted, script: geographer.script.yaml}\nexecutor: {concurrency: 1}\nmemory: {enabled: false}\n",
		"geographer.script.yaml": geographerScript,
	})
	r := skein(t, dir, env, "", "run", "--config", "boss.yaml", "--config", "geographer.yaml", "--json", "Name the capitals of France and Italy.")
	if r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	res := parseRunJSON(t, r)
	if res.Outcome != "success" || res.FinalText != "Paris and Rome." {
		t.Fatalf("outcome %q, answer %q; want success with both capitals\n%s", res.Outcome, res.FinalText, r)
	}

	r = skein(t, dir, env, "", "trace", "tree", "--json", res.SessionID)
	if r.code != 0 {
		t.Fatalf("trace tree: %s", r)
	}
	var tree struct {
		Agent    string `json:"agent"`
		Children []struct {
			Agent   string `json:"agent"`
			Task    string `json:"task"`
			Outcome string `json:"outcome"`
		} `json:"children"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tree); err != nil {
		t.Fatalf("tree: %v\n%s", err, r)
	}
	var tasks []string
	for _, c := range tree.Children {
		if c.Agent != "geographer" || c.Outcome != "success" {
			t.Errorf("child %+v, want a successful geographer session", c)
		}
		tasks = append(tasks, c.Task)
	}
	slices.Sort(tasks)
	if tree.Agent != "boss" || !slices.Equal(tasks, []string{`{"country":"France"}`, `{"country":"Italy"}`}) {
		t.Fatalf("tree %+v, want boss with the two geographer calls as children", tree)
	}
}

// Several --config must name different agents, and only commands that serve agents take more
// than one: both are clear errors before anything starts.
func TestSubagentConfigMistakes(t *testing.T) {
	dir := t.TempDir()
	env := cliEnv(t, filepath.Join(dir, "home"))
	writeFiles(t, dir, map[string]string{
		"a.yaml": "agent: {name: same}\nllm: {provider: scripted, model: scripted, script: s.yaml}\n",
		"b.yaml": "agent: {name: same}\nllm: {provider: scripted, model: scripted, script: s.yaml}\n",
		"s.yaml": "rules: []\n",
	})
	r := skein(t, dir, env, "", "run", "--config", "a.yaml", "--config", "b.yaml", "hi")
	if r.code != 2 || !strings.Contains(r.stderr, `both declare agent "same"`) {
		t.Errorf("two files, one agent: %s", r)
	}
	r = skein(t, dir, env, "", "trace", "list", "--config", "a.yaml", "--config", "b.yaml")
	if r.code == 0 || !strings.Contains(r.stderr, "takes one --config") {
		t.Errorf("trace list with two configs: %s", r)
	}
}
