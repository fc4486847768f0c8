package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// toolsScript drives the sessions: one whose needed tool (lookup_customer) is not among the
// retrieved ones, found with find_tools (twice: the second run finds it offered, learned from the
// first); one whose 5 MB result the model pages with read_result, passing on the handle and
// offsets it is shown. The miner's calls get a guideline a model would write.
const toolsScript = `rules:
  # The miner's compression calls.
  - when: {system: "skein-miner"}
    reply: {text: "To cancel a customer's subscription, look the customer up with lookup_customer first."}
  # The big log: the first page, the next page, the answer. (Before the rules below: the note
  # that read_result was added also says "Tools added".)
  - when: {last: "next_offset: \\d+\\s+offset: [1-9]"}
    reply: {text: "Paged through the start of the 5 MB billing log."}
  - when: {last: "handle: (res-[0-9a-f]{12})\\s+next_offset: (\\d+)\\s+offset: 0\\s"}
    reply:
      tool_calls:
        - {name: read_result, args: {handle: "$1", offset: "$2"}}
  - when: {last: "large_result:\\s+handle: (res-[0-9a-f]{12})"}
    reply:
      tool_calls:
        - {name: read_result, args: {handle: "$1", offset: 0}}
  - when: {last: "Read the billing log"}
    reply:
      tool_calls:
        - {name: big, args: {rows: 38000}}
  # Finding the customer tool, using it, answering.
  - when: {last: "status: done"}
    reply: {text: "Cancelled the subscription of acme-gmbh at the end of the period."}
  - when: {last: "Tools added to your tool list for this step"}
    reply:
      tool_calls:
        - {name: lookup_customer, args: {query: acme-gmbh}}
  - when: {last: "Cancel the subscription"}
    reply:
      text: None of my tools finds a customer; looking for one.
      tool_calls:
        - {name: find_tools, args: {query: find a customer account}}
`

func readTrace(t *testing.T, home, session string) []protocol.Event {
	t.Helper()
	f, err := os.Open(filepath.Join(home, "traces", session+".jsonl"))
	if err != nil {
		t.Fatalf("trace file: %v", err)
	}
	defer f.Close()
	var evs []protocol.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e protocol.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("trace line: %v", err)
		}
		evs = append(evs, e)
	}
	return evs
}

func toolsPhase(evs []protocol.Event, phase string) []protocol.Event {
	var out []protocol.Event
	for _, e := range evs {
		if e.Type == protocol.EvTools && e.Attrs["phase"] == phase {
			out = append(out, e)
		}
	}
	return out
}

// `skein run` with tool retrieval over the 74-tool catalogue (the embedded memoryd embeds with
// MiniLM; the executor asks it over NATS): a session whose needed tool is not in the first set
// succeeds through find_tools; the miner learns "for tasks like this, use lookup_customer", and
// the next run of the task is offered it at once; a session pages through a 5 MB result.
func TestCLIRetrievedToolsAndLargeResult(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	root := devtest.RepoRoot(t)
	devtest.NeedProgram(t, "python3")
	binaries(t) // built before the runs' deadlines start
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	env := cliEnv(t, home)
	agent := `agent:
  name: ops
  max_steps: 6
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  manifest_dirs: [` + filepath.Join(root, "executor", "testdata", "catalog", "tools") + `, ` + filepath.Join(root, "executor", "testdata", "tools") + `]
  max_result_tokens: 2000
  retrieval:
    enabled: true
`
	writeFiles(t, dir, map[string]string{"agent.yaml": agent, "script.yaml": toolsScript})
	// run runs task as session id and returns its result and its trace.
	run := func(id, task string) (runJSON, []protocol.Event) {
		t.Helper()
		r := skein(t, dir, env, "", "run", "--config", "agent.yaml", "--json", "--session-id", id, task)
		if r.code != 0 {
			t.Fatalf("run: %s", r)
		}
		return parseRunJSON(t, r), readTrace(t, home, id)
	}

	res, evs := run("find-tools", "Cancel the subscription of customer acme-gmbh at the end of their billing period.")
	if res.Outcome != "success" || !strings.Contains(res.FinalText, "Cancelled") {
		t.Fatalf("result %+v", res)
	}
	off := toolsPhase(evs, "offered")
	if len(off) != 1 || off[0].Attrs["ranker"] != "hybrid" || slices.Contains(off[0].Tools, "lookup_customer") {
		t.Fatalf("offered %+v: want a hybrid ranking without lookup_customer", off)
	}
	if w := toolsPhase(evs, "widened"); len(w) != 1 || w[0].Attrs["by"] != protocol.ToolFindTools || !slices.Contains(w[0].Tools, "lookup_customer") {
		t.Fatalf("widened %+v", w)
	}
	if u := toolsPhase(evs, "used"); len(u) != 1 || !slices.Equal(u[0].Tools, []string{"find_tools", "lookup_customer"}) {
		t.Fatalf("used %+v", u)
	}

	// The miner turned the first run into a success pattern naming lookup_customer; retrieval
	// boosts the tools of the patterns memoryd retrieves for the step.
	if res, evs = run("find-tools-again", "Cancel the subscription of customer acme-gmbh at the end of their billing period."); res.Outcome != "success" {
		t.Fatalf("result %+v", res)
	}
	off = toolsPhase(evs, "offered")
	if len(off) != 1 || !slices.Contains(off[0].Tools, "lookup_customer") || !strings.Contains(off[0].Attrs["boosted"], "lookup_customer") {
		t.Fatalf("offered %+v: want lookup_customer offered at once, boosted by the learned pattern", off)
	}

	if res, evs = run("big-result", "Read the billing log and tell me how it starts."); res.Outcome != "success" {
		t.Fatalf("result %+v", res)
	}
	var calls []protocol.Event
	for _, e := range evs {
		if e.Type == protocol.EvToolCall {
			calls = append(calls, e)
		}
	}
	if len(calls) != 3 || calls[0].Tool != "big" || calls[1].Tool != protocol.ToolReadResult || calls[2].Tool != protocol.ToolReadResult {
		t.Fatalf("calls %d: want big, then read_result twice", len(calls))
	}
	var ref struct {
		StoredAs string `json:"stored_as"`
		Bytes    int    `json:"bytes"`
	}
	if err := json.Unmarshal(calls[0].Result.Result, &ref); err != nil || ref.StoredAs == "" || ref.Bytes < 5_000_000 {
		t.Fatalf("trace of the big call %s: want the handle and a 5 MB size", calls[0].Result.Result)
	}
	var page struct {
		Handle     string `json:"handle"`
		Offset     int    `json:"offset"`
		NextOffset int    `json:"next_offset"`
		Text       string `json:"text"`
	}
	for i, c := range calls[1:] {
		if !c.Result.OK {
			t.Fatalf("read_result %d failed: %s", i, c.Result.Error)
		}
		if err := json.Unmarshal(c.Result.Result, &page); err != nil || page.Handle != ref.StoredAs || page.Text == "" {
			t.Fatalf("page %d: %s", i, c.Result.Result)
		}
	}
	if page.Offset == 0 || !strings.HasPrefix(string(calls[1].Result.Result), `{"bytes":`) {
		t.Fatalf("the second page starts at %d; want where the first ended", page.Offset)
	}
}
