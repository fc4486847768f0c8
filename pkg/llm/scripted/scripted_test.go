package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/config"
	llm "github.com/skein-mesh/skein/pkg/llm/core"
)

const script = `
rules:
  - when: {system: "(?i)guideline", last: "unknown language"}
    reply: {text: "Use two-letter codes."}
  - when: {last: "(?i)greet"}
    times: 1
    reply:
      text: "I'll greet Ada."
      tool_calls: [{name: hello, args: {name: Ada, lang: english, n: 2, tags: [a, b]}}]
  - when: {last: "(?i)greet|unknown language"}
    reply:
      tool_calls: [{name: hello, args: {name: Ada, lang: en}}]
  - when: {last: "broken"}
    reply:
      tool_calls: [{name: hello, args_raw: '{"name": "Ada"'}]
  - when: {last: "Hello, Ada"}
    reply: {text: "Hello, Ada!"}
`

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func user(text string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}
}

// turn appends the model's answer and the tool results to a transcript, as the executor does.
func turn(msgs []llm.Message, resp *llm.Response, results ...string) []llm.Message {
	a := llm.Message{Role: llm.RoleAssistant}
	if resp.Text != "" {
		a.Content = append(a.Content, llm.Block{Type: llm.BlockText, Text: resp.Text})
	}
	u := llm.Message{Role: llm.RoleUser}
	for i := range resp.ToolCalls {
		c := resp.ToolCalls[i]
		a.Content = append(a.Content, llm.Block{Type: llm.BlockToolUse, ToolUse: &c})
		u.Content = append(u.Content, llm.Block{Type: llm.BlockToolResult, ToolResult: &llm.ToolResult{CallID: c.ID, Content: results[i]}})
	}
	return append(msgs, a, u)
}

// conversation runs the greeting loop and returns the model's answers.
func conversation(t *testing.T, b llm.Backend) []*llm.Response {
	sys := []llm.SystemBlock{{Text: "You are a greeter."}}
	msgs := []llm.Message{user("Please greet Ada")}
	var out []*llm.Response
	results := []string{`{"ok":false,"error":"unknown language: english"}`, `{"ok":true,"result":"Hello, Ada"}`}
	for i := 0; i < 3; i++ {
		resp, err := b.Complete(context.Background(), llm.Request{System: sys, Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
		if len(resp.ToolCalls) == 0 {
			break
		}
		msgs = turn(msgs, resp, results[i])
	}
	return out
}

func TestLoopTimesAndUsage(t *testing.T) {
	b, err := New(config.LLM{Provider: "scripted", Script: write(t, script)})
	if err != nil {
		t.Fatal(err)
	}
	got := conversation(t, b)
	if len(got) != 3 {
		t.Fatalf("%d answers", len(got))
	}
	first := got[0]
	if first.Text != "I'll greet Ada." || first.StopReason != llm.StopToolUse || first.ToolCalls[0].Name != "hello" ||
		string(first.ToolCalls[0].Args) != `{"lang":"english","n":2,"name":"Ada","tags":["a","b"]}` {
		t.Fatalf("first: %+v %s", first, first.ToolCalls[0].Args)
	}
	// times: 1 is used up in this conversation, so the tool error leads to the next rule.
	if string(got[1].ToolCalls[0].Args) != `{"lang":"en","name":"Ada"}` || got[1].ToolCalls[0].ID == first.ToolCalls[0].ID {
		t.Fatalf("second: %+v", got[1].ToolCalls)
	}
	if got[2].Text != "Hello, Ada!" || got[2].StopReason != llm.StopEndTurn || got[2].Model != "scripted" {
		t.Fatalf("third: %+v", got[2])
	}
	if got[0].Usage.InputTokens == 0 || got[1].Usage.InputTokens <= got[0].Usage.InputTokens || got[0].Usage.OutputTokens == 0 {
		t.Fatalf("usage %+v then %+v", got[0].Usage, got[1].Usage)
	}
	// A new conversation with the same task gets the full script again.
	if again := conversation(t, b); again[0].Text != "I'll greet Ada." {
		t.Fatalf("second run started with %+v", again[0])
	}
}

func TestConcurrentSessionsEachGetFullScript(t *testing.T) {
	b, err := New(config.LLM{Script: write(t, script)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := conversation(t, b)
			if len(got) != 3 || got[0].Text != "I'll greet Ada." || got[2].Text != "Hello, Ada!" {
				errs <- fmt.Sprintf("session got %d answers, first %q", len(got), got[0].Text)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestSystemMatchMalformedArgsAndNoMatch(t *testing.T) {
	path := write(t, script)
	b, _ := New(config.LLM{Script: path})
	resp, err := b.Complete(context.Background(), llm.Request{
		System:   []llm.SystemBlock{{Text: "identity"}, {Text: "Write a GUIDELINE."}},
		Messages: []llm.Message{user("tool said: unknown language")}})
	if err != nil || resp.Text != "Use two-letter codes." {
		t.Fatalf("system match: %+v %v", resp, err)
	}
	resp, err = b.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("broken args please")}})
	if err != nil || string(resp.ToolCalls[0].Args) != `{"name": "Ada"` || resp.ToolCalls[0].ValidArgs() {
		t.Fatalf("args_raw: %+v %v", resp, err)
	}
	_, err = b.Complete(context.Background(), llm.Request{Messages: []llm.Message{user("something nobody scripted " + strings.Repeat("x", 200))}})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"something nobody scripted`) || !strings.Contains(err.Error(), "…") {
		t.Fatalf("no match: %v", err)
	}
}

func TestBadScripts(t *testing.T) {
	cases := map[string]string{
		"":          "empty script",
		"rules: []": "no rules",
		"rules:\n  - reply: {text: a}\n    bogus: 1":                                 "line 3: field bogus", // unknown key, with its line
		"rules:\n  - when: {last: \"(\"}\n    reply: {text: a}":                      "rules[0].when.last: invalid regular expression",
		"rules:\n  - reply: {text: a}\n  - when: {last: x}":                          "rules[1]: reply is required",
		"rules:\n  - reply: {}":                                                      "rules[0].reply: needs text or tool_calls",
		"rules:\n  - reply: {tool_calls: [{args: {a: 1}}]}":                          "rules[0].reply.tool_calls[0]: name is required",
		"rules:\n  - reply: {tool_calls: [{name: x, args: [1, 2]}]}":                 "rules[0].reply.tool_calls[0].args: must be a map",
		"rules:\n  - reply: {tool_calls: [{name: x, args: {a: 1}, args_raw: '{}'}]}": "args and args_raw are exclusive",
		"rules:\n  - reply: {text: a}\n    times: -1":                                "rules[0].times",
		"rules: {a: b}": "cannot unmarshal",
	}
	for body, want := range cases {
		_, err := Parse("agent.script.yaml", []byte(body))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "agent.script.yaml") {
			t.Errorf("%q: %v (want %q)", body, err, want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

// "$N" argument values take the capture groups of when.last: numbers as numbers, the rest as
// strings; other values and unmatched groups stay as written.
func TestArgsFromCaptures(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`rules:
  - when: {last: "handle: (res-\\w+) next: (\\d+)"}
    reply:
      tool_calls:
        - {name: read_result, args: {handle: "$1", offset: "$2", note: "keep $1", other: "$7"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := FromScript(s).Complete(context.Background(), llm.Request{Messages: []llm.Message{user("handle: res-ab12 next: 8000")}})
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if err := json.Unmarshal(resp.ToolCalls[0].Args, &args); err != nil {
		t.Fatal(err)
	}
	if args["handle"] != "res-ab12" || args["offset"] != float64(8000) || args["note"] != "keep $1" || args["other"] != "$7" {
		t.Fatalf("args %v", args)
	}
}

// when.tools matches the names of the tools a call offers: a script calls a tool while it is
// offered and searches for it otherwise.
func TestToolsMatchTheOfferedSet(t *testing.T) {
	s, err := Parse("tools.yaml", []byte(`
rules:
  - when: {tools: "(?m)^lookup_customer$"}
    reply:
      tool_calls: [{name: lookup_customer, args: {query: acme}}]
  - reply:
      tool_calls: [{name: find_tools, args: {query: find a customer}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := FromScript(s)
	ask := func(tools ...string) string {
		req := llm.Request{Messages: []llm.Message{user("Cancel acme's subscription")}}
		for _, n := range tools {
			req.Tools = append(req.Tools, llm.ToolDef{Name: n})
		}
		resp, err := b.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ToolCalls[0].Name
	}
	if got := ask("cancel_subscription", "lookup_customer", "finish"); got != "lookup_customer" {
		t.Fatalf("with lookup_customer offered the script called %s", got)
	}
	if got := ask("cancel_subscription", "lookup_customer_notes", "finish"); got != "find_tools" {
		t.Fatalf("without lookup_customer offered the script called %s", got)
	}
	if _, err := Parse("bad.yaml", []byte("rules:\n  - when: {tools: \"(\"}\n    reply: {text: x}\n")); err == nil ||
		!strings.Contains(err.Error(), "rules[0].when.tools") {
		t.Fatalf("a bad when.tools: %v", err)
	}
}

// The reply's text streams a word at a time, chunk_ms apart (the rule's over the script's);
// the pieces make the answer.
func TestTextStreamsInChunks(t *testing.T) {
	s, err := Parse("s.yaml", []byte(`
chunk_ms: 5
rules:
  - when: {last: slow}
    chunk_ms: 30
    reply: {text: "one two  three\nfour"}
  - reply: {text: "fast answer here"}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := FromScript(s)
	ask := func(text string) ([]string, time.Duration, *llm.Response) {
		var got []string
		req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}},
			Stream: func(d llm.Delta) { got = append(got, d.Text) }}
		start := time.Now()
		resp, err := b.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return got, time.Since(start), resp
	}
	got, took, resp := ask("slow please")
	if fmt.Sprintf("%q", got) != `["one " "two  " "three\n" "four"]` || strings.Join(got, "") != resp.Text || took < 90*time.Millisecond {
		t.Fatalf("pieces %q in %v", got, took)
	}
	if got, _, resp := ask("other"); len(got) != 3 || strings.Join(got, "") != resp.Text {
		t.Fatalf("pieces %q", got)
	}
	if _, err := Parse("s.yaml", []byte("rules:\n  - reply: {text: x}\n    chunk_ms: -1\n")); err == nil || !strings.Contains(err.Error(), "chunk_ms") {
		t.Fatalf("negative chunk_ms: %v", err)
	}
}
