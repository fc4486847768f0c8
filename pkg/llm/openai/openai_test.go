package openai

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/config"
	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
)

var system = "You are a careful agent. " + strings.Repeat("Check every tool result before answering. ", 150)

var tools = []llm.ToolDef{
	{Name: "echo", Description: "Echo the text back.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
}

func newBackend(t *testing.T, url string, mod func(*config.LLM), opts ...llm.Option) *Backend {
	t.Helper()
	t.Setenv("OPENAI_API_KEY", "")
	cfg := config.LLM{Provider: "openai", Model: "gpt-4o-mini", MaxTokens: 512, BaseURL: url, TimeoutS: 10, MaxRetries: 3}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg, append([]llm.Option{llm.WithRetryWait(5*time.Millisecond, 20*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// session returns the request of step n of a tool-using loop, with this file's tools and system
// prompt.
func session(steps int) llm.Request {
	return llmtest.Session(system, tools, "Echo three things.", steps)
}

type wire struct {
	Model               string           `json:"model"`
	MaxTokens           int              `json:"max_tokens"`
	MaxCompletionTokens int              `json:"max_completion_tokens"`
	Tools               []map[string]any `json:"tools"`
	Messages            []map[string]any `json:"messages"`
}

func decode(t *testing.T, b []byte) wire {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWireAndToolCalls(t *testing.T) {
	srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: map[string]any{"text": "a"}}, {Name: "echo", Args: map[string]any{"text": "b"}}}},
	}})
	b := newBackend(t, srv.URL, nil)
	resp, err := b.Complete(context.Background(), session(2))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != llm.StopToolUse || len(resp.ToolCalls) != 2 || string(resp.ToolCalls[1].Args) != `{"text":"b"}` {
		t.Fatalf("resp %+v", resp)
	}
	rec := srv.Requests()[0]
	if got := rec.Header.Get("Authorization"); got != "Bearer unused" {
		t.Fatalf("keyless loopback sends %q", got)
	}
	w := decode(t, rec.Body)
	if w.Model != "gpt-4o-mini" || w.MaxTokens != 512 || w.MaxCompletionTokens != 0 {
		t.Fatalf("model/limits: %+v", w)
	}
	if len(w.Tools) != 1 || w.Tools[0]["type"] != "function" || w.Tools[0]["function"].(map[string]any)["name"] != "echo" {
		t.Fatalf("tools %v", w.Tools)
	}
	var roles []string
	for _, m := range w.Messages {
		roles = append(roles, m["role"].(string))
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,assistant,tool" {
		t.Fatalf("roles %v", roles)
	}
	for i := 2; i < len(w.Messages); i += 2 {
		call := w.Messages[i]["tool_calls"].([]any)[0].(map[string]any)
		if call["id"] != w.Messages[i+1]["tool_call_id"] {
			t.Fatalf("tool message %d not paired with its call", i+1)
		}
	}
	if strings.Contains(string(rec.Body), "cache_control") {
		t.Fatal("cache markers sent to OpenAI")
	}
}

// TestCachedTokensMapped runs a growing session twice: from the second call on, the fake
// reports cached prompt tokens and the backend maps them so input + cache read = prompt.
func TestCachedTokensMapped(t *testing.T) {
	srv := llmtest.NewOpenAI(t, llmtest.Script{})
	b := newBackend(t, srv.URL, nil)
	var got []llm.Response
	for pass := 0; pass < 2; pass++ {
		for step := 0; step < 3; step++ {
			r, err := b.Complete(context.Background(), session(step))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, *r)
		}
	}
	if got[0].Usage.CacheReadInputTokens != 0 {
		t.Fatalf("first call cached %d", got[0].Usage.CacheReadInputTokens)
	}
	for i, r := range got[1:] {
		if r.Usage.CacheReadInputTokens < 1024 || r.Usage.CacheReadInputTokens%128 != 0 {
			t.Fatalf("call %d: cached %d", i+1, r.Usage.CacheReadInputTokens)
		}
	}
	for i, rec := range srv.Requests() {
		if got[i].Usage != rec.Usage {
			t.Fatalf("call %d: mapped %+v, server %+v", i, got[i].Usage, rec.Usage)
		}
	}
}

func TestMalformedArgsReturnedRaw(t *testing.T) {
	srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{{Name: "echo", ArgsRaw: `{"text": "unterminated`}}}}})
	b := newBackend(t, srv.URL, nil)
	resp, err := b.Complete(context.Background(), session(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || string(resp.ToolCalls[0].Args) != `{"text": "unterminated` || resp.ToolCalls[0].ValidArgs() {
		t.Fatalf("calls %+v", resp.ToolCalls)
	}
}

func TestRetriesAndGiveUp(t *testing.T) {
	srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{
		{Status: 429, RetryAfter: "1"}, {Reset: true}, {Status: 503}, {Text: "ok"}}})
	var mu sync.Mutex
	var waits []time.Duration
	b := newBackend(t, srv.URL, nil, llm.WithRetryNotify(func(_ int, w time.Duration, _ error) {
		mu.Lock()
		waits = append(waits, w)
		mu.Unlock()
	}))
	resp, err := b.Complete(context.Background(), session(0))
	if err != nil || resp.Text != "ok" || srv.Calls() != 4 || len(waits) != 3 || waits[0] < time.Second {
		t.Fatalf("resp %+v err %v calls %d waits %v", resp, err, srv.Calls(), waits)
	}

	srv = llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{{Reset: true}, {Reset: true}}})
	b = newBackend(t, srv.URL, func(c *config.LLM) { c.MaxRetries = 1 })
	_, err = b.Complete(context.Background(), session(0))
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != 0 || ae.Attempts != 2 || !strings.HasPrefix(err.Error(), "openai: gave up after 2 attempts") {
		t.Fatalf("reset give-up: %v", err)
	}

	srv = llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{{Status: 401}}})
	b = newBackend(t, srv.URL, nil)
	if _, err = b.Complete(context.Background(), session(0)); llm.HTTPStatus(err) != 401 || srv.Calls() != 1 {
		t.Fatalf("401: %v after %d calls", err, srv.Calls())
	}
}

func TestMaxTokensRetry(t *testing.T) {
	long := strings.Repeat("token ", 300)
	srv := llmtest.NewOpenAI(t, llmtest.Script{Replies: []llmtest.Reply{{Text: long}, {Text: long}}})
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.MaxTokens = 200 })
	resp, err := b.Complete(context.Background(), session(0))
	if err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || decode(t, reqs[1].Body).MaxTokens != 400 || resp.StopReason != llm.StopEndTurn {
		t.Fatalf("calls %d, stop %s", len(reqs), resp.StopReason)
	}
	if resp.Usage != reqs[0].Usage.Add(reqs[1].Usage) || reqs[0].Usage.OutputTokens != 200 {
		t.Fatalf("usage %+v", resp.Usage)
	}
}
