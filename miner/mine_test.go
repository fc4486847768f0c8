package miner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

func toolEv(tool, args string, r protocol.ToolResult) protocol.Event {
	return protocol.Event{Type: protocol.EvToolCall, Tool: tool, Args: json.RawMessage(args), Result: &r}
}

func failingSession(id string, outcome protocol.Outcome) []protocol.Event {
	return []protocol.Event{
		{SessionID: id, Type: protocol.EvSessionStarted, Agent: "demo", Task: "Summarize the sales in /data/x.csv"},
		{SessionID: id, Type: protocol.EvRetrieval, Guidelines: []protocol.Guideline{
			{ID: "g-avoid", Text: "Check that the file exists before csv_read: it fails with \"no such file\".", Polarity: protocol.PolarityAvoid, Tools: []string{"csv_read"}},
			{ID: "g-pattern", Text: "List files, then read with csv_read.", Polarity: protocol.PolarityPattern, Tools: []string{"list_files", "csv_read"}},
		}},
		toolEv("csv_read", `{"path":"/data/x.csv"}`, protocol.ToolResult{OK: false, Kind: protocol.ToolErrToolError,
			Error: "no such file: /data/x.csv", Stderr: "reading input\ntraceback line 1\nFileNotFoundError: /data/x.csv"}),
		// The same failure again: still one candidate.
		toolEv("csv_read", `{"path":"/data/x.csv"}`, protocol.ToolResult{OK: false, Kind: protocol.ToolErrToolError, Error: "no such file: /data/x.csv"}),
		// A generic exit with the cause in stderr.
		toolEv("shell", `{"cmd":"wc -l x"}`, protocol.ToolResult{OK: false, Kind: protocol.ToolErrExit, Error: "exited 1",
			Stderr: "warming up\nwc: x: No such file or directory\n"}),
		toolEv("list_files", `{"dir":"/data"}`, protocol.ToolResult{OK: true, Result: json.RawMessage(`["y.csv"]`)}),
		toolEv("csv_read", `{"path":"/data/y.csv"}`, protocol.ToolResult{OK: true, Result: json.RawMessage(`{"rows":3}`)}),
		{SessionID: id, Type: protocol.EvFinal, Outcome: outcome, Text: "done"},
		{SessionID: id, Type: protocol.EvUsage, Report: &protocol.UsageReport{}},
	}
}

func TestMineFailuresCarryTheRealError(t *testing.T) {
	s := ParseSession("s1", failingSession("s1", protocol.OutcomeSuccessWithRecovery))
	if s.Agent != "demo" || !s.Ended || s.Outcome != protocol.OutcomeSuccessWithRecovery || len(s.Calls) != 5 || len(s.Retrieved) != 2 {
		t.Fatalf("parsed %+v", s)
	}
	evs := Mine(s)
	if len(evs) != 3 {
		t.Fatalf("want 2 failures and 1 pattern, got %d: %+v", len(evs), evs)
	}
	csv, sh, pat := evs[0], evs[1], evs[2]
	if csv.Error != "no such file: /data/x.csv" || !strings.Contains(csv.Stderr, "FileNotFoundError: /data/x.csv") ||
		!strings.Contains(csv.Recovery, "/data/y.csv") || csv.Polarity != protocol.PolarityAvoid {
		t.Fatalf("csv evidence %+v", csv)
	}
	if !strings.Contains(sh.Error, "wc: x: No such file or directory") {
		t.Fatalf("generic exit not replaced by stderr: %q", sh.Error)
	}
	if pat.Polarity != protocol.PolarityPattern || pat.Key != "pattern:list_files>csv_read" {
		t.Fatalf("pattern %+v", pat)
	}
	for _, want := range []string{"no such file: /data/x.csv", "FileNotFoundError", "Afterwards: csv_read succeeded"} {
		if !strings.Contains(csv.Prompt(), want) {
			t.Errorf("prompt lacks %q:\n%s", want, csv.Prompt())
		}
	}
	tpl := csv.Template(30)
	if !strings.Contains(tpl, "no such file") || tokenize.Count(tpl) > 30 {
		t.Fatalf("template %q (%d tokens)", tpl, tokenize.Count(tpl))
	}
	// Keys are stable: mining the same trace again yields the same keys.
	again := Mine(ParseSession("s1", failingSession("s1", protocol.OutcomeSuccessWithRecovery)))
	for i := range evs {
		if again[i].Key != evs[i].Key {
			t.Fatalf("unstable key %s vs %s", evs[i].Key, again[i].Key)
		}
	}
}

func TestNoPatternFromFailedSession(t *testing.T) {
	for _, ev := range Mine(ParseSession("s1", failingSession("s1", protocol.OutcomeIncompleteToolFail))) {
		if ev.Polarity == protocol.PolarityPattern {
			t.Fatalf("pattern mined from a failed session: %+v", ev)
		}
	}
}

func TestTemplateStaysUnderCap(t *testing.T) {
	ev := Evidence{Polarity: protocol.PolarityAvoid, Tool: "http_get", Args: `{"url":"https://example.invalid/a/very/long/path?with=query&and=more"}`,
		Error: strings.Repeat("connection refused by upstream proxy while resolving ", 5)}
	for _, n := range []int{10, 20, 30} {
		if got := ev.Template(n); tokenize.Count(got) > n || got == "" {
			t.Fatalf("cap %d: %q has %d tokens", n, got, tokenize.Count(got))
		}
	}
	p := Evidence{Polarity: protocol.PolarityPattern, Tools: []string{"list_files", "csv_read"}, Task: "Summarize the sales figures in the quarterly csv file for the board"}
	if got := p.Template(30); !strings.Contains(got, "list_files, then csv_read") {
		t.Fatalf("pattern template %q", got)
	}
}

func TestFeedbackMarks(t *testing.T) {
	// The session hit the missing file, then read another one: in the end it did what the avoid
	// guideline says, and both of the pattern's tools ran.
	ok := Feedback(ParseSession("s1", failingSession("s1", protocol.OutcomeSuccess)))
	if strings.Join(ok.Followed, ",") != "g-avoid,g-pattern" || strings.Join(ok.Helpful, ",") != "g-avoid,g-pattern" ||
		strings.Join(ok.Echo, ",") != "g-avoid,g-pattern" || len(ok.Harmful)+len(ok.Fizzle) != 0 {
		t.Fatalf("success: %+v", ok)
	}
	// Followed, but the session failed elsewhere: no mark either way.
	bad := Feedback(ParseSession("s1", failingSession("s1", protocol.OutcomeIncompleteToolFail)))
	if len(bad.Helpful)+len(bad.Harmful)+len(bad.Echo)+len(bad.Fizzle) != 0 {
		t.Fatalf("failure: %+v", bad)
	}

	g := protocol.Guideline{ID: "g", Polarity: protocol.PolarityAvoid, Tools: []string{"csv_read"},
		Text: `Avoid calling csv_read with {"path":"/data/x.csv"}: it failed with "no such file: /data/x.csv"`}
	session := func(outcome protocol.Outcome, g protocol.Guideline, calls ...protocol.Event) []protocol.Event {
		evs := []protocol.Event{{Type: protocol.EvSessionStarted, Agent: "demo", Task: "t"}, {Type: protocol.EvRetrieval, Guidelines: []protocol.Guideline{g}}}
		return append(append(evs, calls...), protocol.Event{Type: protocol.EvFinal, Outcome: outcome})
	}
	join := func(ids []string) string { return strings.Join(ids, ",") }
	// Heeded: it never touched the path the guideline named.
	if fb := Feedback(ParseSession("s2", session(protocol.OutcomeSuccess, g, toolEv("csv_read", `{"path":"/data/y.csv"}`, protocol.ToolResult{OK: true})))); join(fb.Followed) != "g" || join(fb.Echo) != "g" {
		t.Fatalf("heeded guideline not followed: %+v", fb)
	}
	// Ignored: used the path it warned about; no helpful mark although the session succeeded.
	if fb := Feedback(ParseSession("s2", session(protocol.OutcomeSuccess, g, toolEv("csv_read", `{"path":"/data/x.csv"}`, protocol.ToolResult{OK: true})))); len(fb.Helpful) != 0 || join(fb.Fizzle) != "g" {
		t.Fatalf("used the avoided path: %+v", fb)
	}
	// Followed into a failure: heeded it and its tool still failed.
	if fb := Feedback(ParseSession("s2", session(protocol.OutcomeIncompleteToolFail, g, toolEv("csv_read", `{"path":"/data/y.csv"}`,
		protocol.ToolResult{OK: false, Error: "permission denied"})))); join(fb.Harmful) != "g" || join(fb.Fizzle) != "g" {
		t.Fatalf("followed into failure: %+v", fb)
	}
	// A pattern naming a value: followed when a successful call used it, followed into a
	// failure when every call using it failed, ignored when none used it.
	p := protocol.Guideline{ID: "p", Polarity: protocol.PolarityPattern, Tools: []string{"report_tool"}, Text: `Always pass dates to report_tool as ISO dates like "2024-05-01".`}
	iso, dmy := `{"date":"2024-05-01"}`, `{"date":"01/05/2024"}`
	fail := protocol.ToolResult{OK: false, Error: "date must be DD/MM/YYYY"}
	if fb := Feedback(ParseSession("s3", session(protocol.OutcomeSuccess, p, toolEv("report_tool", iso, protocol.ToolResult{OK: true})))); join(fb.Echo) != "p" {
		t.Fatalf("pattern followed: %+v", fb)
	}
	if fb := Feedback(ParseSession("s3", session(protocol.OutcomeSuccessWithRecovery, p, toolEv("report_tool", iso, fail), toolEv("report_tool", dmy, protocol.ToolResult{OK: true})))); join(fb.Harmful) != "p" || len(fb.Helpful) != 0 {
		t.Fatalf("pattern followed into failure: %+v", fb)
	}
	if fb := Feedback(ParseSession("s3", session(protocol.OutcomeSuccess, p, toolEv("report_tool", dmy, protocol.ToolResult{OK: true})))); join(fb.Fizzle) != "p" || len(fb.Helpful) != 0 {
		t.Fatalf("pattern ignored: %+v", fb)
	}
	// None of its tools called: present when things went right, nothing more.
	if fb := Feedback(ParseSession("s4", session(protocol.OutcomeSuccess, p, toolEv("csv_read", `{}`, protocol.ToolResult{OK: true})))); join(fb.Helpful) != "p" || len(fb.Echo)+len(fb.Fizzle) != 0 {
		t.Fatalf("unused: %+v", fb)
	}
}

func TestLiterals(t *testing.T) {
	got := literals(`Avoid calling csv_read with {"path":"/data/x.csv"} or --header; use 'report.md' not "path"`, []string{"csv_read"})
	want := "/data/x.csv,--header,report.md"
	if strings.Join(got, ",") != want {
		t.Fatalf("literals %v, want %s", got, want)
	}
}

func TestCleanGuideline(t *testing.T) {
	for in, want := range map[string]string{
		"\n- \"Check the path first.\"\n": "Check the path first.",
		"Guideline: Use list_files.":      "Use list_files.",
		"":                                "",
	} {
		if got := cleanGuideline(in); got != want {
			t.Errorf("cleanGuideline(%q) = %q", in, got)
		}
	}
}

// A session that found its tool through find_tools teaches "for tasks like X, use Y" with the
// tool it found, never the built-ins: retrieval boosts the pattern's tools next time.
func TestPatternSkipsBuiltins(t *testing.T) {
	evs := []protocol.Event{
		{SessionID: "s", Type: protocol.EvSessionStarted, Agent: "demo", Task: "Cancel the subscription of acme"},
		toolEv(protocol.ToolFindTools, `{"query":"find a customer"}`, protocol.ToolResult{OK: true, Result: json.RawMessage(`{"added":[]}`)}),
		toolEv(protocol.ToolReadResult, `{"handle":"x"}`, protocol.ToolResult{OK: false, Kind: protocol.ToolErrBadArgs, Error: "unknown handle"}),
		toolEv("lookup_customer", `{"query":"acme"}`, protocol.ToolResult{OK: true, Result: json.RawMessage(`{}`)}),
		{SessionID: "s", Type: protocol.EvFinal, Outcome: protocol.OutcomeSuccessWithRecovery, Text: "done"},
		{SessionID: "s", Type: protocol.EvUsage, Report: &protocol.UsageReport{}},
	}
	got := Mine(ParseSession("s", evs))
	if len(got) != 1 || got[0].Key != "pattern:lookup_customer" || strings.Join(got[0].Tools, ",") != "lookup_customer" {
		t.Fatalf("mined %+v, want only the pattern of lookup_customer", got)
	}
}

func TestParseSessionRedactsWhatItMines(t *testing.T) {
	s := ParseSession("s-1", []protocol.Event{{SessionID: "s-1", Type: protocol.EvToolCall, Tool: "fetch",
		Args:   json.RawMessage(`{"token":"tok-should-not-survive"}`),
		Result: &protocol.ToolResult{Kind: protocol.ToolErrExit, Error: "auth failed for sk-ant-api03-MINEDKEY0123456", Stderr: "password=hunter2hunter2"}}})
	if len(s.Calls) != 1 {
		t.Fatalf("calls: %+v", s.Calls)
	}
	c := s.Calls[0]
	for _, secret := range []string{"tok-should-not-survive", "MINEDKEY", "hunter2hunter2"} {
		if strings.Contains(string(c.Args)+c.Result.Error+c.Result.Stderr, secret) {
			t.Errorf("%q survived into the mined call: %+v", secret, c)
		}
	}
}

// A session whose steps used another memory (memory.namespace) learns into it; feedback goes to
// the same memory.
func TestSessionLearnsIntoTheMemoryItsStepsUsed(t *testing.T) {
	evs := failingSession("s1", protocol.OutcomeSuccess)
	if s := ParseSession("s1", evs); s.MemoryAgent() != "demo" || Feedback(s).Agent != "demo" {
		t.Fatalf("own memory: %q, feedback to %q", s.MemoryAgent(), Feedback(s).Agent)
	}
	started := protocol.Event{SessionID: "s1", Type: protocol.EvStepStarted, Agent: "demo", Attrs: map[string]string{protocol.AttrMemory: "team"}}
	evs = append(evs[:1], append([]protocol.Event{started}, evs[1:]...)...)
	s := ParseSession("s1", evs)
	if s.Agent != "demo" || s.MemoryAgent() != "team" || Feedback(s).Agent != "team" {
		t.Fatalf("agent %q memory %q feedback %q; want demo, team, team", s.Agent, s.MemoryAgent(), Feedback(s).Agent)
	}
}

// A child's own reason is what it said in finish, else what its session ended with.
func TestChildReason(t *testing.T) {
	evs := []protocol.Event{
		{Type: protocol.EvSessionStarted, Agent: "scout"},
		{Type: protocol.EvDecision, Text: protocol.ToolFinish, Reason: "the task names no country"},
		{Type: protocol.EvFinal, Outcome: protocol.OutcomeNotAccomplished, Reason: "the model reports the task was not accomplished: the task names no country"},
	}
	if got := ChildReason(evs); got != "the task names no country" {
		t.Fatalf("finish reason: %q", got)
	}
	evs = []protocol.Event{{Type: protocol.EvIncomplete, Outcome: protocol.OutcomeIncomplete, Reason: "step limit of 3 model turns reached"}}
	if got := ChildReason(evs); got != "step limit of 3 model turns reached" {
		t.Fatalf("terminal reason: %q", got)
	}
	if got := ChildReason(nil); got != "" {
		t.Fatalf("no trace: %q", got)
	}
}
