package executor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

var testTools = []string{"rendezvous", "sleep", "fail"}

// rendezvousScript makes the model call rendezvous twice in one turn, with the arguments given,
// and answer once it sees their results.
func rendezvousScript(dir, argsA, argsB string) string {
	return fmt.Sprintf(`
rules:
  - when: {last: "seen_on_arrival"}
    reply: {text: "both calls answered"}
  - reply:
      tool_calls:
        - {name: rendezvous, args: {dir: %q, me: a%s}}
        - {name: rendezvous, args: {dir: %q, me: b%s}}
`, dir, argsA, dir, argsB)
}

type arrival struct {
	Me   string   `json:"me"`
	Seen []string `json:"seen_on_arrival"`
}

func toolArrivals(t *testing.T, evs []protocol.Event) []arrival {
	t.Helper()
	var out []arrival
	for _, e := range sessiontest.Of(evs, protocol.EvToolCall, "") {
		if e.Result == nil || !e.Result.OK {
			t.Fatalf("tool call %s failed: %+v", e.CallID, e.Result)
		}
		var a arrival
		if err := json.Unmarshal(e.Result.Result, &a); err != nil {
			t.Fatalf("tool result %s: %v", e.Result.Result, err)
		}
		out = append(out, a)
	}
	return out
}

// Each call waits for the other to have started, and the first one also waits for the second to
// finish: both can only succeed if they run at once, and the first finishes last. The results
// must still reach the model in its own order, each paired with its call id.
func TestToolCallsRunConcurrentlyAndAnswerInModelOrder(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	dir := devtest.SharedDir(t)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	rec := &recorder{Backend: scriptBackend(t, rendezvousScript(dir,
		`, await: [b.started, b.done]`, `, await: [a.started]`))}
	x := m.executor(t, cfg, rec)

	res, evs := m.runStep(t, x, step(t, cfg, "meet"))
	if res.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("outcome %s (%s), want success", res.Outcome, res.Reason)
	}
	// a was held until b had finished: they overlapped, and a finished last.
	arr := toolArrivals(t, evs)
	if len(arr) != 2 || arr[0].Me != "a" || arr[1].Me != "b" {
		t.Fatalf("tool_call events %+v, want a then b (the model's order)", arr)
	}

	reqs := rec.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	calls := toolUses(reqs[1])
	results := lastResults(reqs[1])
	if len(calls) != 2 || len(results) != 2 {
		t.Fatalf("second request: %d calls, %d results, want 2 and 2", len(calls), len(results))
	}
	for i, want := range []string{"me: a", "me: b"} {
		if results[i].CallID != calls[i].ID {
			t.Errorf("result %d answers call %q, want %q", i, results[i].CallID, calls[i].ID)
		}
		if !strings.Contains(results[i].Content, want) || results[i].IsError {
			t.Errorf("result %d = %q (error %v), want it to hold %q", i, results[i].Content, results[i].IsError, want)
		}
	}
	for _, f := range []string{"a.done", "b.done"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// With max_parallel 1 the second call to run must find the first one finished.
func TestMaxParallelOneSerializes(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	dir := devtest.SharedDir(t)
	cfg := testConfig(testdata(t, "tools"), testTools...)
	cfg.Tools.MaxParallel = 1
	x := m.executor(t, cfg, scriptBackend(t, rendezvousScript(dir, "", "")))

	res, evs := m.runStep(t, x, step(t, cfg, "one at a time"))
	if res.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("outcome %s (%s), want success", res.Outcome, res.Reason)
	}
	arr := toolArrivals(t, evs)
	if len(arr) != 2 {
		t.Fatalf("%d tool calls, want 2", len(arr))
	}
	first, second := arr[0], arr[1]
	if len(first.Seen) != 0 {
		first, second = second, first
	}
	if len(first.Seen) != 0 {
		t.Fatalf("both calls found the other one on arrival (%v, %v): they overlapped", arr[0].Seen, arr[1].Seen)
	}
	other := first.Me
	if !slices.Equal(second.Seen, []string{other + ".done", other + ".started"}) {
		t.Fatalf("%s found %v on arrival, want %s finished", second.Me, second.Seen, other)
	}
}

func TestOutcomes(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	cases := []struct {
		name     string
		maxSteps int
		script   string
		outcome  protocol.Outcome
		reason   string // substring of the reason
		sees     string // substring of the newest message of the last model call
	}{
		{name: "success", script: `
rules:
  - when: {last: "slept_s"}
    reply: {text: "slept well"}
  - reply: {tool_calls: [{name: sleep, args: {seconds: 0}}]}
`, outcome: protocol.OutcomeSuccess, sees: "slept_s"},
		{name: "recovery after a failed tool", script: `
rules:
  - when: {last: "could not write the report"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "the report tool failed; here is the summary instead"}}]}
  - reply: {tool_calls: [{name: fail}]}
`, outcome: protocol.OutcomeSuccessWithRecovery, sees: "disk quota exceeded"},
		{name: "plain-text give-up after a failed tool, asked for finish", script: `
rules:
  - when: {last: "answered in plain text"}
    reply: {tool_calls: [{name: finish, args: {accomplished: false, answer: "Could not deploy.", reason: "disk full"}}]}
  - when: {last: "could not write the report"}
    reply: {text: "Could not deploy."}
  - reply: {tool_calls: [{name: fail}]}
`, outcome: protocol.OutcomeNotAccomplished, reason: "disk full"},
		{name: "plain-text answer after a failed tool, never reported", script: `
rules:
  - when: {last: "(could not write the report|answered in plain text)"}
    reply: {text: "Could not deploy."}
  - reply: {tool_calls: [{name: fail}]}
`, outcome: protocol.OutcomeNotAccomplished, reason: "without reporting through finish"},
		{name: "plain-text answer after a failed tool at the turn limit", maxSteps: 2, script: `
rules:
  - when: {last: "could not write the report"}
    reply: {text: "Could not deploy."}
  - reply: {tool_calls: [{name: fail}]}
`, outcome: protocol.OutcomeNotAccomplished, reason: "without reporting through finish"},
		{name: "turn limit", maxSteps: 3, script: `
rules:
  - reply: {tool_calls: [{name: sleep, args: {seconds: 0}}]}
`, outcome: protocol.OutcomeIncomplete, reason: "turn limit of 3"},
		{name: "turn limit after a tool failure", maxSteps: 2, script: `
rules:
  - reply: {tool_calls: [{name: fail}]}
`, outcome: protocol.OutcomeIncompleteToolFail, reason: "turn limit of 2"},
		{name: "empty answer", script: `
rules:
  - reply: {text: "   "}
`, outcome: protocol.OutcomeFailed, reason: "empty answer"},
		{name: "malformed arguments once", script: `
rules:
  - when: {last: "not a valid JSON object"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "sorry, fixed"}}]}
  - reply: {tool_calls: [{name: sleep, args_raw: '{"seconds": '}]}
`, outcome: protocol.OutcomeSuccessWithRecovery, sees: "not a valid JSON object"},
		{name: "malformed arguments twice", script: `
rules:
  - reply: {tool_calls: [{name: sleep, args_raw: '{"seconds": '}]}
`, outcome: protocol.OutcomeFailed, reason: "malformed tool arguments 2 turns in a row"},
		{name: "unknown tool", script: `
rules:
  - when: {last: "no tool named"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "that tool does not exist"}}]}
  - reply: {tool_calls: [{name: teleport, args: {to: mars}}]}
`, outcome: protocol.OutcomeSuccessWithRecovery, sees: `teleport\"; the available tools are: fail, rendezvous, sleep`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(testdata(t, "tools"), testTools...)
			if tc.maxSteps > 0 {
				cfg.Agent.MaxTurns = tc.maxSteps
			}
			rec := &recorder{Backend: scriptBackend(t, tc.script)}
			x := m.executor(t, cfg, rec)
			res, evs := m.runStep(t, x, step(t, cfg, "do the thing"))
			if res.Outcome != tc.outcome || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("outcome %s (reason %q), want %s with reason containing %q", res.Outcome, res.Reason, tc.outcome, tc.reason)
			}
			fin := sessiontest.Of(evs, protocol.EvStepFinished, "")
			if len(fin) != 1 || fin[0].Outcome != tc.outcome {
				t.Fatalf("step_finished events %+v, want one with outcome %s", fin, tc.outcome)
			}
			reqs := rec.requests()
			if len(sessiontest.Of(evs, protocol.EvModelCall, "")) != len(reqs) {
				t.Errorf("%d model_call events for %d model calls", len(sessiontest.Of(evs, protocol.EvModelCall, "")), len(reqs))
			}
			if tc.sees != "" {
				var seen []string
				for _, r := range lastResults(reqs[len(reqs)-1]) {
					seen = append(seen, r.Content)
				}
				if !strings.Contains(strings.Join(seen, "\n"), tc.sees) {
					t.Fatalf("the model saw %q, want it to contain %q", seen, tc.sees)
				}
			}
		})
	}
}

// The trace keeps usage for every model call and the raw JSON of every tool result, whatever
// format the model read; the format decides the system prompt's note and what the model reads.
func TestTraceAndResultFormat(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), testTools...)
	for _, format := range []string{"toon", "json"} {
		t.Run(format, func(t *testing.T) {
			dir := devtest.SharedDir(t)
			cfg := testConfig(testdata(t, "tools"), testTools...)
			cfg.Tools.ResultFormat = format
			rec := &recorder{Backend: scriptBackend(t, rendezvousScript(dir, "", ""))}
			x := m.executor(t, cfg, rec)
			res, evs := m.runStep(t, x, step(t, cfg, "trace it"))
			if res.Outcome != protocol.OutcomeSuccess {
				t.Fatalf("outcome %s (%s)", res.Outcome, res.Reason)
			}

			calls := sessiontest.Of(evs, protocol.EvModelCall, "")
			if len(calls) != 2 {
				t.Fatalf("%d model_call events, want 2", len(calls))
			}
			var total protocol.Usage
			for _, c := range calls {
				if c.Usage == nil || c.Usage.InputTokens == 0 || c.Usage.OutputTokens == 0 || c.Model == "" || c.Provider != "scripted" {
					t.Fatalf("model_call event without usage or model: %+v", c)
				}
				total = total.Add(*c.Usage)
			}
			if total != res.Usage {
				t.Errorf("step usage %+v, want the sum of its model calls %+v", res.Usage, total)
			}
			tcs := sessiontest.Of(evs, protocol.EvToolCall, "")
			if len(tcs) != 2 {
				t.Fatalf("%d tool_call events, want 2", len(tcs))
			}
			for _, e := range tcs {
				if e.Tool != "rendezvous" || e.CallID == "" || !json.Valid(e.Args) || e.Result == nil ||
					!json.Valid(e.Result.Result) || !strings.HasPrefix(string(e.Result.Result), "{") {
					t.Fatalf("tool_call event %+v: want tool, call id, JSON args and a raw JSON result", e)
				}
			}

			req := rec.requests()[1]
			system := req.System[0].Text
			results := lastResults(req)
			if format == "toon" {
				if !strings.Contains(system, "TOON") {
					t.Error("system prompt lacks the TOON note")
				}
				for _, r := range results {
					if json.Valid([]byte(r.Content)) || !strings.Contains(r.Content, "seen_on_arrival") {
						t.Errorf("result %q: want TOON", r.Content)
					}
				}
			} else {
				if strings.Contains(system, "TOON") {
					t.Error("system prompt has the TOON note with JSON results")
				}
				for _, r := range results {
					if !json.Valid([]byte(r.Content)) {
						t.Errorf("result %q: want JSON", r.Content)
					}
				}
			}
		})
	}
}
