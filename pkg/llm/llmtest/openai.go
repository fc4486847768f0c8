package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// OpenAI's automatic prompt caching: prompts of at least 1,024 tokens, hits in 128-token steps.
const (
	openAIMinCached  = 1024
	openAICachedStep = 128
	openAICacheTTL   = 10 * time.Minute
)

// NewOpenAI starts a fake OpenAI chat-completions API (also what Ollama, vLLM and llama.cpp
// serve). Server.URL ends in /v1, like the base_url of such servers.
func NewOpenAI(t testing.TB, script Script) *Server {
	return newServer(t, script, func(s *Server) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/chat/completions", s.serveOpenAI)
		return mux
	}, "/v1")
}

type oMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type oRequest struct {
	Model               string          `json:"model"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Tools               json.RawMessage `json:"tools"`
	Messages            []oMessage      `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func openAIError(w http.ResponseWriter, status int, msg string) {
	typ := "invalid_request_error"
	switch {
	case status == 429:
		typ = "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": nil}})
}

func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req oRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, 400, "We could not parse the JSON body of your request: "+err.Error())
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == 0 {
		maxTokens = req.MaxTokens
	}
	blocks, lastText, err := flattenOpenAI(req)
	n, reply := s.next(req.Model, maxTokens, lastText, body)
	rec := Recorded{N: n, Body: body, Header: r.Header.Clone(), Reply: reply}
	delay(r.Context(), reply.Delay)
	switch {
	case reply.Reset:
		s.record(rec)
		resetConn(w)
		return
	case reply.Status != 0:
		rec.Status = reply.Status
		s.record(rec)
		if reply.RetryAfter != "" {
			w.Header().Set("retry-after", reply.RetryAfter)
		}
		openAIError(w, reply.Status, fmt.Sprintf("injected fault %d", reply.Status))
		return
	case err != nil:
		rec.Status = 400
		s.record(rec)
		openAIError(w, 400, err.Error())
		return
	}

	prompt, cached := s.computeOpenAICache(blocks)
	text, calls, outTokens, cut := outputOf(reply, maxTokens)
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if text != "" {
		msg["content"] = text
	}
	if len(calls) > 0 {
		var tcs []map[string]any
		for i, c := range calls {
			tcs = append(tcs, map[string]any{"id": fmt.Sprintf("call_%02d_%02d", n, i), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": argsString(c)}})
		}
		msg["tool_calls"] = tcs
	}
	finish := "stop"
	switch {
	case cut:
		finish = "length"
	case len(calls) > 0:
		finish = "tool_calls"
	}
	// OpenAI's prompt_tokens includes the cached ones; the backend splits them.
	usage := protocol.Usage{InputTokens: int64(prompt - cached), CacheReadInputTokens: int64(cached), OutputTokens: int64(outTokens)}
	wireUsage := map[string]any{
		"prompt_tokens": prompt, "completion_tokens": outTokens, "total_tokens": prompt + outTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": cached, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0, "audio_tokens": 0},
	}
	head := map[string]any{"id": fmt.Sprintf("chatcmpl-fake%04d", n), "created": time.Now().Unix(),
		"model": req.Model, "system_fingerprint": "fp_fake"}
	rec.Status, rec.Streamed = 200, req.Stream
	if !req.Stream {
		rec.Usage = usage
		s.record(rec)
		body := map[string]any{"object": "chat.completion",
			"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}}, "usage": wireUsage}
		for k, v := range head {
			body[k] = v
		}
		writeJSON(w, 200, body)
		return
	}
	if !req.StreamOptions.IncludeUsage {
		wireUsage = nil // the API reports no usage in a stream unless asked
	}
	if wireUsage == nil {
		usage = protocol.Usage{}
	}
	s.streamed(newSSE(w, r, reply), rec, usage, func(st *sse) bool {
		return streamOpenAI(st, head, text, msg["tool_calls"], finish, wireUsage)
	})
}

// streamOpenAI sends an answer as chat completion chunks and reports whether the stream
// reached [DONE]: the role first, the text a word per chunk, each tool call's id and name then
// its arguments a few bytes per chunk, the finish reason in a chunk of its own, then (when
// asked) the usage in a chunk without choices.
func streamOpenAI(st *sse, head map[string]any, text string, toolCalls any, finish string, usage map[string]any) bool {
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{"object": "chat.completion.chunk",
			"choices": []map[string]any{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
		if usage != nil {
			c["usage"] = nil
		}
		for k, v := range head {
			c[k] = v
		}
		return c
	}
	if !st.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)) {
		return false
	}
	for _, w := range words(text) {
		if !st.chunk("", chunk(map[string]any{"content": w}, nil)) {
			return false
		}
	}
	calls, _ := toolCalls.([]map[string]any)
	for i, c := range calls {
		fn := c["function"].(map[string]any)
		first := map[string]any{"index": i, "id": c["id"], "type": "function", "function": map[string]any{"name": fn["name"], "arguments": ""}}
		if !st.chunk("", chunk(map[string]any{"tool_calls": []any{first}}, nil)) {
			return false
		}
		for _, p := range pieces(fn["arguments"].(string), 10) {
			if !st.chunk("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil)) {
				return false
			}
		}
	}
	if !st.event("", chunk(map[string]any{}, finish)) {
		return false
	}
	if usage != nil {
		last := map[string]any{"object": "chat.completion.chunk", "choices": []any{}, "usage": usage}
		for k, v := range head {
			last[k] = v
		}
		if !st.event("", last) {
			return false
		}
	}
	return st.last("", []byte("[DONE]"))
}

// computeOpenAICache returns the prompt size and the longest previously seen prefix (block
// boundary) of at least 1,024 tokens, rounded down to a 128-token step; it then remembers
// every boundary of this prompt.
func (s *Server) computeOpenAICache(blocks []flatBlock) (prompt, cached int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, b := range blocks {
		total += b.tokens
		if total >= openAIMinCached && s.cache.has(b.hash) {
			cached = total
			s.cache.refresh(b.hash)
		}
	}
	run := 0
	for _, b := range blocks {
		run += b.tokens
		if run >= openAIMinCached {
			s.cache.put(b.hash, openAICacheTTL)
		}
	}
	if cached > 0 {
		cached = openAIMinCached + (cached-openAIMinCached)/openAICachedStep*openAICachedStep
	}
	return total, cached
}

func flattenOpenAI(req oRequest) ([]flatBlock, string, error) {
	if len(req.Messages) == 0 {
		return nil, "", fmt.Errorf("[] is too short - 'messages'")
	}
	var out []flatBlock
	prev := ""
	add := func(canonical []byte, tokens int) {
		prev = hashChain(prev, req.Model, canonical)
		out = append(out, flatBlock{tokens: tokens, hash: prev})
	}
	if len(req.Tools) > 0 && string(req.Tools) != "null" {
		add(req.Tools, tokenize.Count(string(req.Tools)))
	}
	lastText := ""
	var pending []string
	for _, m := range req.Messages {
		if m.Role == "tool" {
			if !contains(pending, m.ToolCallID) {
				//lint:ignore ST1005 the API's own message, word for word
				return nil, "", fmt.Errorf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			pending = remove(pending, m.ToolCallID)
		} else if len(pending) > 0 {
			//lint:ignore ST1005 the API's own message, word for word
			return nil, "", fmt.Errorf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
		}
		text := contentText(m.Content)
		tokens := 4 + tokenize.Count(text) // role and framing overhead per message
		if m.Role == "assistant" {
			for _, c := range m.ToolCalls {
				pending = append(pending, c.ID)
				tokens += tokenize.Count(c.Function.Name) + tokenize.Count(c.Function.Arguments)
			}
		}
		if m.Role == "user" || m.Role == "tool" {
			lastText = text
		}
		canonical, _ := json.Marshal(m)
		add(canonical, tokens)
	}
	return out, lastText, nil
}

func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		return str(raw)
	}
	var parts []map[string]json.RawMessage
	_ = json.Unmarshal(raw, &parts)
	var texts []string
	for _, p := range parts {
		texts = append(texts, str(p["text"]))
	}
	return strings.Join(texts, "\n")
}

func remove(list []string, s string) []string {
	out := list[:0:0]
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}
