package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/config"
	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
)

const model = "claude-sonnet-4-5"

// stableSystem is a system prompt well over Sonnet's 1,024-token cache minimum.
var stableSystem = "You are a careful agent. " + strings.Repeat("Follow the policies; check every tool result before you answer. ", 120)

var tools = []llm.ToolDef{
	{Name: "echo", Description: "Echo the text back.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)},
	{Name: "sum", Description: "Add numbers.", InputSchema: json.RawMessage(`{"type":"object","properties":{"xs":{"type":"array","items":{"type":"number"}}},"required":["xs"],"additionalProperties":false}`)},
}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newBackend(t *testing.T, url string, mod func(*config.LLM), opts ...llm.Option) *Backend {
	t.Helper()
	t.Setenv("SKEIN_TEST_ANTHROPIC_KEY", "test-key")
	cfg := config.LLM{Provider: "anthropic", Model: model, MaxTokens: 512, BaseURL: url,
		APIKeyEnv: "SKEIN_TEST_ANTHROPIC_KEY", Cache: "auto", TimeoutS: 10, MaxRetries: 3}
	if mod != nil {
		mod(&cfg)
	}
	opts = append([]llm.Option{llm.WithRetryWait(5*time.Millisecond, 20*time.Millisecond)}, opts...)
	b, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wire is the request as the fake received it.
type wire struct {
	Model     string           `json:"model"`
	MaxTokens int              `json:"max_tokens"`
	System    []map[string]any `json:"system"`
	Tools     []map[string]any `json:"tools"`
	Messages  []struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	} `json:"messages"`
}

func decode(t *testing.T, body []byte) wire {
	t.Helper()
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatalf("request body: %v\n%s", err, body)
	}
	return w
}

// markers lists where cache_control markers are on the wire.
func markers(w wire) []string {
	var out []string
	for i, tl := range w.Tools {
		if tl["cache_control"] != nil {
			out = append(out, "tools["+itoa(i)+"]")
		}
	}
	for i, s := range w.System {
		if s["cache_control"] != nil {
			out = append(out, "system["+itoa(i)+"]")
		}
	}
	for i, m := range w.Messages {
		for j, c := range m.Content {
			if c["cache_control"] != nil {
				out = append(out, "messages["+itoa(i)+"]["+itoa(j)+"]")
			}
		}
	}
	return out
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// session returns the request of step n of a tool-using loop, with Sonnet's tools and system
// prompt.
func session(task string, steps int) llm.Request {
	return llmtest.Session(stableSystem, tools, task, steps)
}

func TestWireLayoutAndUsage(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{
		{Text: "Calling echo.", ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: map[string]any{"text": "hi"}}}},
	}})
	b := newBackend(t, srv.URL, nil)
	req := session("Say hi through echo.", 2)
	// A tool set large enough to be worth its own breakpoint.
	req.Tools = append([]llm.ToolDef(nil), tools...)
	req.Tools[0].Description = strings.Repeat("Echo the text back exactly as given. ", 150)
	resp, err := b.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != llm.StopToolUse || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "echo" ||
		string(resp.ToolCalls[0].Args) != `{"text":"hi"}` || resp.Text != "Calling echo." {
		t.Fatalf("response: %+v", resp)
	}
	rec := srv.Requests()[0]
	// The SDK sends the key from WithAPIKey as a bearer token.
	if rec.Status != 200 || (rec.Header.Get("X-Api-Key") != "test-key" && rec.Header.Get("Authorization") != "Bearer test-key") {
		t.Fatalf("status %d, key %q", rec.Status, rec.Header.Get("X-Api-Key"))
	}
	w := decode(t, rec.Body)
	if w.Model != model || w.MaxTokens != 512 {
		t.Fatalf("model %q max_tokens %d", w.Model, w.MaxTokens)
	}
	if got := markers(w); strings.Join(got, " ") != "tools[1] system[0] messages[4][0]" {
		t.Fatalf("cache markers at %v", got)
	}
	if w.Tools[0]["name"] != "echo" || w.Tools[1]["name"] != "sum" ||
		w.Tools[1]["input_schema"].(map[string]any)["additionalProperties"] != false {
		t.Fatalf("tools: %v", w.Tools)
	}
	roles := []string{}
	for _, m := range w.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant,user" {
		t.Fatalf("message order %v", roles)
	}
	// Each tool_result answers the tool_use just before it.
	for i := 1; i+1 < len(w.Messages); i += 2 {
		use, res := w.Messages[i].Content[0], w.Messages[i+1].Content[0]
		if use["type"] != "tool_use" || res["type"] != "tool_result" || use["id"] != res["tool_use_id"] {
			t.Fatalf("pairing at %d: %v / %v", i, use, res)
		}
	}
	// The fake cached the marked prefix on this first call: written, not read.
	if resp.Usage != rec.Usage || resp.Usage.CacheCreationInputTokens == 0 || resp.Usage.CacheReadInputTokens != 0 {
		t.Fatalf("usage %+v (server said %+v)", resp.Usage, rec.Usage)
	}
	if resp.Model != model || resp.Latency <= 0 {
		t.Fatalf("model %q latency %v", resp.Model, resp.Latency)
	}
}

func TestShortPrefixIsNotMarkedAndLogged(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{})
	var logs logBuf
	b := newBackend(t, srv.URL, nil, llm.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	req := llm.Request{System: []llm.SystemBlock{{Text: "Short system prompt.", Cache: true}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}, Cache: true}}}
	if _, err := b.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := markers(decode(t, srv.Requests()[0].Body)); len(got) != 0 {
		t.Fatalf("markers sent on a short prompt: %v", got)
	}
	if !strings.Contains(logs.String(), "minimum cacheable length") || !strings.Contains(logs.String(), "min_tokens=1024") {
		t.Fatalf("no log line about the minimum: %q", logs.String())
	}
}

func TestAtMostFourMarkersKeepingNewest(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{})
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.CacheTTL = "1h" })
	req := session("task", 2)
	req.System = append(req.System, llm.SystemBlock{Text: "Strategic guidelines: be brief.", Cache: true})
	for i := range req.Messages {
		req.Messages[i].Cache = true // 5 message marks + tools + 2 system = 8 candidates
	}
	if _, err := b.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	w := decode(t, srv.Requests()[0].Body)
	got := markers(w)
	// The tools alone are under the minimum, so the candidates are 2 system + 5 messages.
	if len(got) != 4 || got[3] != "messages[4][0]" {
		t.Fatalf("markers %v, want 4 ending with the newest message", got)
	}
	last := w.Messages[4].Content[0]["cache_control"].(map[string]any)
	if last["type"] != "ephemeral" || last["ttl"] != "1h" {
		t.Fatalf("cache_control %v", last)
	}
}

func TestCacheOffSendsNoMarkers(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{})
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.Cache = "off" })
	for i := 0; i < 2; i++ {
		resp, err := b.Complete(context.Background(), session("task", 1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.CacheReadInputTokens != 0 || resp.Usage.CacheCreationInputTokens != 0 {
			t.Fatalf("cache used with caching off: %+v", resp.Usage)
		}
	}
	for _, r := range srv.Requests() {
		if got := markers(decode(t, r.Body)); len(got) != 0 {
			t.Fatalf("markers with cache off: %v", got)
		}
	}
}

// TestSessionReadsStablePrefixFromCache runs one multi-step session twice against the
// cache-computing fake: every call after the first reads the stable prefix (tools + system)
// and the previous steps from the cache. With caching off nothing is ever read.
func TestSessionReadsStablePrefixFromCache(t *testing.T) {
	run := func(cache string) (calls []llm.Response) {
		srv := llmtest.NewAnthropic(t, llmtest.Script{})
		b := newBackend(t, srv.URL, func(c *config.LLM) { c.Cache = cache })
		for pass := 0; pass < 2; pass++ {
			for step := 0; step < 4; step++ {
				resp, err := b.Complete(context.Background(), session("Process the batch.", step))
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, *resp)
			}
		}
		return calls
	}
	on := run("auto")
	if on[0].Usage.CacheReadInputTokens != 0 || on[0].Usage.CacheCreationInputTokens == 0 {
		t.Fatalf("first call: %+v", on[0].Usage)
	}
	stable := on[0].Usage.CacheCreationInputTokens // tools + system + first message
	for i, c := range on[1:] {
		if c.Usage.CacheReadInputTokens < stable-100 {
			t.Fatalf("call %d read %d from cache, want at least the stable prefix (~%d): %+v", i+1, c.Usage.CacheReadInputTokens, stable, c.Usage)
		}
	}
	// Within a pass, each step also reads the previous step's transcript.
	if on[2].Usage.CacheReadInputTokens <= on[1].Usage.CacheReadInputTokens {
		t.Fatalf("step 2 read %d, step 1 read %d: growing transcript not read from cache", on[2].Usage.CacheReadInputTokens, on[1].Usage.CacheReadInputTokens)
	}
	// The second pass is all hits for the prefix that was written in the first.
	if on[4].Usage.CacheCreationInputTokens != 0 {
		t.Fatalf("second pass first call wrote %d", on[4].Usage.CacheCreationInputTokens)
	}
	off := run("off")
	for i, c := range off {
		if c.Usage.CacheReadInputTokens != 0 || c.Usage.CacheCreationInputTokens != 0 {
			t.Fatalf("cache off, call %d: %+v", i, c.Usage)
		}
	}
	var billedOn, billedOff int64
	for i := range on {
		billedOn += on[i].Usage.InputTokens
		billedOff += off[i].Usage.InputTokens
	}
	if billedOn*4 > billedOff {
		t.Fatalf("full-price input with cache %d vs without %d: expected far less", billedOn, billedOff)
	}
	var created, read int64
	for _, c := range on {
		created += c.Usage.CacheCreationInputTokens
		read += c.Usage.CacheReadInputTokens
	}
	t.Logf("8 calls: cache off bills %d input tokens at full price; cache on bills %d full, writes %d, reads %d", billedOff, billedOn, created, read)
}

func TestRetriesHonourRetryAfter(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{
		{Status: 429, RetryAfter: "1"},
		{Status: 529},
		{Reset: true},
		{Status: 500},
		{Text: "finally"},
	}})
	var waits []time.Duration
	var mu sync.Mutex
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.MaxRetries = 5 },
		llm.WithRetryNotify(func(_ int, wait time.Duration, _ error) { mu.Lock(); waits = append(waits, wait); mu.Unlock() }))
	resp, err := b.Complete(context.Background(), session("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "finally" || srv.Calls() != 5 || len(waits) != 4 {
		t.Fatalf("text %q, calls %d, retries %d", resp.Text, srv.Calls(), len(waits))
	}
	if waits[0] < time.Second {
		t.Fatalf("retry-after 1s not honoured: waited %v", waits[0])
	}
	if waits[1] >= time.Second {
		t.Fatalf("retry-after leaked into the next wait: %v", waits[1])
	}
}

func TestGiveUpAndPermanentErrors(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Status: 500}, {Status: 502}, {Status: 503}, {Status: 500}}})
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.MaxRetries = 2 })
	_, err := b.Complete(context.Background(), session("t", 0))
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Attempts != 3 || !ae.Transient || srv.Calls() != 3 {
		t.Fatalf("err %v (%+v), calls %d", err, ae, srv.Calls())
	}
	if !strings.HasPrefix(err.Error(), "anthropic: HTTP 503: gave up after 3 attempts") {
		t.Fatalf("message: %v", err)
	}

	srv = llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Status: 400}}})
	b = newBackend(t, srv.URL, nil)
	_, err = b.Complete(context.Background(), session("t", 0))
	if llm.HTTPStatus(err) != 400 || srv.Calls() != 1 || !strings.HasPrefix(err.Error(), "anthropic: HTTP 400") {
		t.Fatalf("400: %v, calls %d", err, srv.Calls())
	}
}

func TestMaxTokensRetryCountsWaste(t *testing.T) {
	long := strings.Repeat("word ", 150)
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{{Text: long}, {Text: long}}})
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.MaxTokens = 100 })
	resp, err := b.Complete(context.Background(), session("write", 0))
	if err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || decode(t, reqs[0].Body).MaxTokens != 100 || decode(t, reqs[1].Body).MaxTokens != 200 {
		t.Fatalf("calls %d", len(reqs))
	}
	if resp.StopReason != llm.StopEndTurn || strings.TrimSpace(resp.Text) != strings.TrimSpace(long) {
		t.Fatalf("stop %s, text len %d", resp.StopReason, len(resp.Text))
	}
	want := reqs[0].Usage.Add(reqs[1].Usage)
	if resp.Usage != want || reqs[0].Usage.OutputTokens != 100 {
		t.Fatalf("usage %+v, want both calls %+v", resp.Usage, want)
	}
}

func TestMalformedToolArgsReturnedRaw(t *testing.T) {
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{
		{ToolCalls: []llmtest.ToolCall{{Name: "sum", ArgsRaw: `{"xs": [1, 2`}}},
	}})
	b := newBackend(t, srv.URL, nil)
	resp, err := b.Complete(context.Background(), session("add", 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || string(resp.ToolCalls[0].Args) != `{"xs": [1, 2` || resp.ToolCalls[0].ValidArgs() {
		t.Fatalf("tool calls %+v", resp.ToolCalls)
	}
	// Sending that call back in the transcript must still be a valid request.
	req := session("add", 0)
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ToolUse: &resp.ToolCalls[0]}}},
		llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult,
			ToolResult: &llm.ToolResult{CallID: resp.ToolCalls[0].ID, Content: "arguments are not valid JSON", IsError: true}}}})
	if _, err := b.Complete(context.Background(), req); err != nil {
		t.Fatalf("follow-up with the malformed call: %v", err)
	}
	w := decode(t, srv.Requests()[1].Body)
	if res := w.Messages[2].Content[0]; res["is_error"] != true {
		t.Fatalf("tool_result %v", res)
	}
}

func TestAttemptDeadlineRetriesThenCancelledContext(t *testing.T) {
	// The first answer stalls past timeout_s: that attempt is abandoned and retried.
	srv := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{
		{Delay: time.Minute, Text: "too late"}, {Text: "on time"}}})
	b := newBackend(t, srv.URL, func(c *config.LLM) { c.TimeoutS = 0.3 })
	resp, err := b.Complete(context.Background(), session("t", 0))
	if err != nil || resp.Text != "on time" || srv.Calls() != 2 {
		t.Fatalf("resp %+v, err %v, calls %d", resp, err, srv.Calls())
	}
	// A caller that has already given up gets an error, not a retry loop.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Complete(ctx, session("t", 0)); err == nil || !strings.HasPrefix(err.Error(), "anthropic:") {
		t.Fatalf("cancelled call: %v", err)
	}
}
