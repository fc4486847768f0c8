package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
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
	if r.code != protocol.ExitConfig || !strings.Contains(r.stderr, `both declare agent "same"`) {
		t.Errorf("two files, one agent: %s", r)
	}
	r = skein(t, dir, env, "", "trace", "list", "--config", "a.yaml", "--config", "b.yaml")
	if r.code == 0 || !strings.Contains(r.stderr, "takes one --config") {
		t.Errorf("trace list with two configs: %s", r)
	}
}

const scoutScript = `rules:
  - when: {last: "4417"}
    reply: {text: "The vault code for Peru is 4417."}
  - when: {last: "vault code"}
    reply:
      tool_calls:
        - {name: lookup, args: {country: Peru}}
`

// The boss asks the scout the first time; the next time the scout's finding is in its prompt,
// labelled with where it came from, and it answers from that.
const bossScript = `rules:
  - when: {last: "(?s)found by sub-agent scout in session a-[0-9a-f]+\\] The vault code for Peru is 4417"}
    reply: {text: "4417, from what the scout found before."}
  - when: {last: "(?s)final_text.*4417"}
    reply: {text: "4417, says the scout."}
  - when: {last: "vault code"}
    reply:
      tool_calls:
        - {name: scout, args: {task: "Find the vault code for Peru."}}
`

const lookupManifest = `{"name": "lookup", "description": "Look up the vault code of a country.", "command": ["python3", "./lookup.py"],
 "input_schema": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"], "additionalProperties": false}}`

const lookupPy = `import json, sys
args = json.load(sys.stdin)
codes = {"Peru": "4417"}
print(json.dumps({"ok": True, "result": {"country": args["country"], "code": codes.get(args["country"], "unknown")}}))
`

// The check: a scripted parent delegates to a scripted child that finds a fact with a
// tool; afterwards the parent's memory holds the finding, tagged subagent with the child agent
// and session; the parent's next session has it in its prompt and answers without the child.
// One embedded `skein run` serves both agents each time, with real memory (MiniLM) and the
// permission matrix enforced.
func TestSubagentFindingReachesTheParentsNextSession(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	needMiniLM(t)
	devtest.NeedProgram(t, "python3")
	dir := reachableTempDir(t)
	env := cliEnv(t, filepath.Join(dir, "home"))
	if err := os.Mkdir(filepath.Join(dir, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{
		"boss.yaml":        "agent: {name: boss}\nllm: {provider: scripted, model: scripted, script: boss.script.yaml}\ntools: {agents: [scout]}\n",
		"boss.script.yaml": bossScript,
		"scout.yaml": "agent: {name: scout, description: Finds vault codes of countries.}\n" +
			"llm: {provider: scripted, model: scripted, script: scout.script.yaml}\n" +
			"tools: {manifest_dirs: [tools], enabled: [lookup]}\nmemory: {share_with_parent: true}\n",
		"scout.script.yaml": scoutScript,
		"tools/lookup.json": lookupManifest,
		"tools/lookup.py":   lookupPy,
	})
	run := func(task string) runJSON {
		t.Helper()
		r := skein(t, dir, env, "", "run", "--config", "boss.yaml", "--config", "scout.yaml", "--json", task)
		if r.code != 0 {
			t.Fatalf("run %q: %s", task, r)
		}
		return parseRunJSON(t, r)
	}
	children := func(session string) []string {
		t.Helper()
		r := skein(t, dir, env, "", "trace", "tree", "--json", "--config", "boss.yaml", session)
		if r.code != 0 {
			t.Fatalf("trace tree: %s", r)
		}
		var tree struct {
			Children []struct {
				SessionID string `json:"session_id"`
				Agent     string `json:"agent"`
			} `json:"children"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &tree); err != nil {
			t.Fatalf("tree: %v\n%s", err, r)
		}
		var ids []string
		for _, c := range tree.Children {
			ids = append(ids, c.Agent+"/"+c.SessionID)
		}
		return ids
	}

	first := run("What is the vault code for Peru?")
	if first.FinalText != "4417, says the scout." {
		t.Fatalf("first session answered %q", first.FinalText)
	}
	kids := children(first.SessionID)
	if len(kids) != 1 || !strings.HasPrefix(kids[0], "scout/") {
		t.Fatalf("first session's children %v, want one scout session", kids)
	}
	child := strings.TrimPrefix(kids[0], "scout/")

	r := skein(t, dir, env, "", "memory", "list", "--json", "--config", "boss.yaml", "--agent", "boss")
	if r.code != 0 {
		t.Fatalf("memory list: %s", r)
	}
	var entries []struct {
		Text          string `json:"text"`
		Source        string `json:"source"`
		SourceAgent   string `json:"source_agent"`
		SourceSession string `json:"source_session"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("memory list: %v\n%s", err, r)
	}
	found := false
	for _, e := range entries {
		if e.Source == "subagent" {
			found = found || e.Text == "The vault code for Peru is 4417."
			if e.SourceAgent != "scout" || e.SourceSession != child {
				t.Errorf("entry %+v, want it from scout's session %s", e, child)
			}
		}
	}
	if !found {
		t.Fatalf("boss's memory %+v lacks the scout's finding tagged subagent", entries)
	}
	r = skein(t, dir, env, "", "inspect-memory", "--config", "boss.yaml", "vault code for Peru")
	if r.code != 0 || !strings.Contains(r.stdout, "subagent scout (session "+child+")") {
		t.Fatalf("inspect-memory does not show the source: %s", r)
	}

	second := run("Tell me the vault code for Peru again.")
	if second.FinalText != "4417, from what the scout found before." {
		t.Fatalf("second session answered %q; the finding should have been in its prompt", second.FinalText)
	}
	if kids := children(second.SessionID); len(kids) != 0 {
		t.Fatalf("second session called %v; it had the finding already", kids)
	}
}

// `skein up` given several --config serves every agent: a run that joins it with --nats
// delegates to the second agent, which no other process serves.
func TestSubagentUpServesEveryConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	dir := reachableTempDir(t)
	env := cliEnv(t, filepath.Join(dir, "home"))
	writeFiles(t, dir, map[string]string{
		"boss.yaml": "agent: {name: boss}\nllm: {provider: scripted, model: scripted, script: boss.script.yaml}\n" +
			"tools: {agents: [geographer]}\nmemory: {enabled: false}\nminer: {enabled: false}\n",
		"boss.script.yaml": parallelBossScript,
		"geographer.yaml": "agent:\n  name: geographer\n  input_schema: {type: object, properties: {country: {type: string}}, required: [country]}\n" +
			"llm: {provider: scripted, model: scripted, script: geographer.script.yaml}\nmemory: {enabled: false}\n",
		"geographer.script.yaml": geographerScript,
	})
	addr := freePort(t)
	up := start(t, env, "skein-up", "skein", "up", "--listen", addr, "--config", filepath.Join(dir, "boss.yaml"),
		"--config", filepath.Join(dir, "geographer.yaml"))
	waitForLine(t, up, "skein mesh up")
	r := skein(t, dir, env, "", "run", "--nats", "nats://"+addr, "--config", "boss.yaml", "--json", "Name the capitals of France and Italy.")
	if r.code != 0 {
		t.Fatalf("run against up: %s", r)
	}
	if res := parseRunJSON(t, r); res.FinalText != "Paris and Rome." {
		t.Fatalf("answer %q, want both capitals from the geographer", res.FinalText)
	}
	// Several --config need the embedded mesh: with --nats, say what to do instead.
	r = skein(t, dir, env, "", "run", "--nats", "nats://"+addr, "--config", "boss.yaml", "--config", "geographer.yaml", "hi")
	if r.code != protocol.ExitUsage || !strings.Contains(r.stderr, "start an executor") {
		t.Errorf("run --nats with two configs: %s", r)
	}
}

// relayScript makes an agent pass its task on to next and answer with what next said; when next
// refused or did not accomplish it, the agent reports through finish that it did not either.
func relayScript(next string) string {
	stop := `{name: finish, args: {accomplished: false, answer: "stopped below ` + next + `", reason: "` + next + ` could not relay it"}}`
	return `rules:
  - when: {last: "(?s)refused the task|not_accomplished"}
    reply: {tool_calls: [` + stop + `]}
  - when: {last: "(?s)final_text"}
    reply: {text: "relayed from ` + next + `"}
  - when: {last: "(?i)relay"}
    reply:
      tool_calls:
        - {name: ` + next + `, args: {task: "relay this on"}}
`
}

// A cycle in one embedded `skein run` on executors with one place each: ping's step at depth 2
// runs on the executor whose only place ping's root step had (it waits without it), and the call
// past the depth limit is refused, so the run ends instead of hanging.
func TestSubagentCycleInOneRunEndsAtTheDepthLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	dir := reachableTempDir(t)
	env := cliEnv(t, filepath.Join(dir, "home"))
	agent := func(name, next string) string {
		return "agent: {name: " + name + ", max_depth: 2}\nllm: {provider: scripted, model: scripted, script: " + name + ".script.yaml}\n" +
			"tools: {agents: [" + next + "]}\nexecutor: {concurrency: 1}\nmemory: {enabled: false}\nminer: {enabled: false}\n"
	}
	writeFiles(t, dir, map[string]string{
		"ping.yaml": agent("ping", "pong"), "ping.script.yaml": relayScript("pong"),
		"pong.yaml": agent("pong", "ping"), "pong.script.yaml": relayScript("ping"),
	})
	r := skein(t, dir, env, "", "run", "--config", "ping.yaml", "--config", "pong.yaml", "--json", "Please relay the question.")
	// It ends (no hang), and honestly: the bottom of the cycle was refused, so nobody relayed it.
	if r.code != 1 {
		t.Fatalf("run: %s", r)
	}
	if res := parseRunJSON(t, r); res.Outcome != "not_accomplished" || res.FinalText != "stopped below pong" {
		t.Fatalf("ended %s with %q, want not_accomplished: stopped below pong", res.Outcome, res.FinalText)
	}
}
