package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// The scaffolded greeter, scripted to give up in plain text after its tool failed once and then
// worked: it never reports through finish, not even when asked.
const giveUpScript = `
rules:
  - when: {system: "^skein-miner", last: "unknown language"}
    reply: {text: "Call hello with a two-letter language code such as en, never a language name."}
  - when: {system: "^skein-miner"}
    reply: {text: "Greet people with the hello tool, then repeat its greeting."}
  - when: {last: "(Hello, Ada|answered in plain text)"}
    reply: {text: "Could not deliver the greeting to Ada."}
  - when: {last: "unknown language"}
    reply: {tool_calls: [{name: hello, args: {name: Ada, lang: en}}]}
  - when: {last: "^Greet "}
    reply: {tool_calls: [{name: hello, args: {name: Ada, lang: english}}]}
`

// A plain-text give-up after a tool failure exits 1 as not_accomplished, and the miner mines it
// as that: the failure's lesson is learned, the tools the session used are not learned as a
// success pattern.
func TestCLIPlainTextGiveUpIsNotLearnedAsASuccess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	home := filepath.Join(t.TempDir(), "home")
	env := cliEnv(t, home)
	dir := initProject(t, env)
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(giveUpScript), 0o644); err != nil {
		t.Fatal(err)
	}
	r := skein(t, dir, env, "", "run", "--config", "agent.offline.yaml", "--json", "--session-id", "give-up", "Greet Ada")
	if r.code != 1 {
		t.Fatalf("run: exit %d, want 1\n%s", r.code, r)
	}
	if res := parseRunJSON(t, r); res.Outcome != string(protocol.OutcomeNotAccomplished) || res.FinalText != "Could not deliver the greeting to Ada." {
		t.Fatalf("result %+v; want not_accomplished with the model's text", res)
	}

	r = skein(t, dir, env, "", "trace", "show", "--config", "agent.offline.yaml", "--json", "give-up")
	if r.code != 0 {
		t.Fatalf("trace show: %s", r)
	}
	var minerOutcome protocol.Outcome
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev protocol.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("trace line %q: %v", line, err)
		}
		if ev.Type == protocol.EvUsage && ev.Role == protocol.RoleMiner {
			minerOutcome = ev.Outcome
		}
	}
	if minerOutcome != protocol.OutcomeNotAccomplished {
		t.Fatalf("the miner closed the session as %q; want not_accomplished", minerOutcome)
	}

	r = skein(t, dir, env, "", "memory", "list", "--config", "agent.offline.yaml", "--json", "--all", "--kind", "guideline")
	if r.code != 0 {
		t.Fatalf("memory list: %s", r)
	}
	var entries []struct {
		Polarity protocol.Polarity `json:"polarity"`
		Text     string            `json:"text"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("memory list --json: %v\n%s", err, r.stdout)
	}
	avoid := 0
	for _, e := range entries {
		if e.Polarity == protocol.PolarityPattern {
			t.Errorf("a give-up was learned as a success pattern: %q", e.Text)
		}
		if e.Polarity == protocol.PolarityAvoid {
			avoid++
		}
	}
	if avoid != 1 {
		t.Errorf("%d failure lessons, want the one of the failed call: %+v", avoid, entries)
	}
}
