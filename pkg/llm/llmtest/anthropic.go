package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// NewAnthropic starts a fake Anthropic Messages API. t may be nil (benchmarks, tools); with a
// t the server closes when the test ends. Point the SDK (llm.base_url) at Server.URL.
func NewAnthropic(t testing.TB, script Script) *Server {
	return newServer(t, script, func(s *Server) http.Handler {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/messages", s.serveAnthropic)
		return mux
	}, "")
}

// cacheLookback is how many block boundaries before a breakpoint the provider checks for an
// earlier cached prefix.
const cacheLookback = 20

type aBlock = map[string]json.RawMessage

type aRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	System    json.RawMessage `json:"system"`
	Tools     []aBlock        `json:"tools"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// flatBlock is one cacheable unit of the prompt, in the provider's order: tools, system,
// messages.
type flatBlock struct {
	tokens int
	hash   string // of everything up to and including this block
	bp     bool   // carries cache_control
	ttl    time.Duration
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error",
		"error": map[string]any{"type": typ, "message": msg}})
}

func errorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 404:
		return "not_found_error"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

func (s *Server) serveAnthropic(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req aRequest
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, 400, "invalid_request_error", "malformed JSON body: "+err.Error())
		return
	}
	blocks, lastText, err := flattenAnthropic(req)
	n, reply := s.next(req.Model, req.MaxTokens, lastText, body)
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
		anthropicError(w, reply.Status, errorType(reply.Status), fmt.Sprintf("injected fault %d", reply.Status))
		return
	case err != nil:
		rec.Status = 400
		s.record(rec)
		anthropicError(w, 400, "invalid_request_error", err.Error())
		return
	case req.MaxTokens <= 0:
		rec.Status = 400
		s.record(rec)
		anthropicError(w, 400, "invalid_request_error", "max_tokens: field required")
		return
	}

	usage, by5m, by1h := s.computeAnthropicCache(req.Model, blocks)
	text, calls, outTokens, cut := outputOf(reply, req.MaxTokens)
	usage.OutputTokens = int64(outTokens)

	content := []map[string]any{}
	if text != "" {
		content = append(content, map[string]any{"type": "text", "text": text})
	}
	for i, c := range calls {
		// The real API always sends input as an object; a malformed one is sent as a JSON
		// string so a client sees bytes that are not an object.
		var input json.RawMessage
		if c.ArgsRaw != "" {
			if json.Valid([]byte(c.ArgsRaw)) {
				input = json.RawMessage(c.ArgsRaw)
			} else {
				input, _ = json.Marshal(c.ArgsRaw)
			}
		} else {
			input = json.RawMessage(argsString(c))
		}
		content = append(content, map[string]any{"type": "tool_use",
			"id": fmt.Sprintf("toolu_%02d_%02d", n, i), "name": c.Name, "input": input})
	}
	stop := "end_turn"
	switch {
	case cut:
		stop = "max_tokens"
	case len(calls) > 0:
		stop = "tool_use"
	}
	wireUsage := map[string]any{
		"input_tokens":                usage.InputTokens,
		"output_tokens":               usage.OutputTokens,
		"cache_creation_input_tokens": usage.CacheCreationInputTokens,
		"cache_read_input_tokens":     usage.CacheReadInputTokens,
		"cache_creation": map[string]any{
			"ephemeral_5m_input_tokens": by5m, "ephemeral_1h_input_tokens": by1h},
	}
	msg := map[string]any{
		"id": fmt.Sprintf("msg_fake_%04d", n), "type": "message", "role": "assistant",
		"model": req.Model, "content": content, "stop_reason": stop, "stop_sequence": nil, "usage": wireUsage,
	}
	rec.Status, rec.Streamed = 200, req.Stream
	if !req.Stream {
		rec.Usage = usage
		s.record(rec)
		writeJSON(w, 200, msg)
		return
	}
	s.streamed(newSSE(w, r, reply), rec, usage, func(st *sse) bool {
		return streamAnthropic(st, msg, content, wireUsage)
	})
}

// streamAnthropic sends msg as the Messages API streams it and reports whether the stream
// reached message_stop. message_start carries the input side of the usage (and an output count
// of 1, as the API sends); message_delta carries the stop reason and the whole usage, every
// count cumulative.
func streamAnthropic(st *sse, msg map[string]any, content []map[string]any, usage map[string]any) bool {
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	startUsage := map[string]any{}
	for k, v := range usage {
		startUsage[k] = v
	}
	startUsage["output_tokens"] = 1
	start["content"], start["stop_reason"], start["usage"] = []any{}, nil, startUsage
	if !st.event("message_start", map[string]any{"type": "message_start", "message": start}) {
		return false
	}
	for i, blk := range content {
		var first map[string]any
		var deltas []map[string]any
		switch blk["type"] {
		case "text":
			first = map[string]any{"type": "text", "text": ""}
			for _, w := range words(blk["text"].(string)) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": w})
			}
		case "tool_use":
			first = map[string]any{"type": "tool_use", "id": blk["id"], "name": blk["name"], "input": map[string]any{}}
			for _, p := range pieces(string(blk["input"].(json.RawMessage)), 10) {
				deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": p})
			}
		}
		if !st.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": first}) {
			return false
		}
		if i == 0 && !st.event("ping", map[string]any{"type": "ping"}) {
			return false
		}
		for _, d := range deltas {
			if !st.chunk("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d}) {
				return false
			}
		}
		if !st.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}) {
			return false
		}
	}
	return st.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": msg["stop_reason"], "stop_sequence": nil}, "usage": usage}) &&
		st.last("message_stop", map[string]any{"type": "message_stop"})
}

// computeAnthropicCache finds the longest cached prefix reachable from a breakpoint, writes
// the breakpoints beyond it that meet the model's minimum, and splits the prompt's tokens.
func (s *Server) computeAnthropicCache(model string, blocks []flatBlock) (u protocol.Usage, by5m, by1h int64) {
	prefix := make([]int, len(blocks))
	total := 0
	for i, b := range blocks {
		total += b.tokens
		prefix[i] = total
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	readIdx := -1
	for i, b := range blocks {
		if !b.bp {
			continue
		}
		for k := i; k >= 0 && k >= i-cacheLookback; k-- {
			if s.cache.has(blocks[k].hash) {
				readIdx = max(readIdx, k)
				break
			}
		}
	}
	read := 0
	if readIdx >= 0 {
		read = prefix[readIdx]
		s.cache.refresh(blocks[readIdx].hash)
	}
	minTok := llm.MinCacheableTokens(model)
	lastWrite, prevEnd := readIdx, read
	for i, b := range blocks {
		if !b.bp || i <= readIdx || prefix[i] < minTok {
			continue
		}
		s.cache.put(b.hash, b.ttl)
		// Tokens between the previous written boundary and this one are billed at this
		// breakpoint's TTL.
		if b.ttl >= time.Hour {
			by1h += int64(prefix[i] - prevEnd)
		} else {
			by5m += int64(prefix[i] - prevEnd)
		}
		lastWrite, prevEnd = i, prefix[i]
	}
	created := 0
	if lastWrite > readIdx {
		created = prefix[lastWrite] - read
	}
	return protocol.Usage{InputTokens: int64(total - read - created),
		CacheCreationInputTokens: int64(created), CacheReadInputTokens: int64(read)}, by5m, by1h
}

// flattenAnthropic lays the prompt out as cacheable blocks, validates breakpoints and
// tool_use/tool_result pairing as the API does, and returns the newest user text.
func flattenAnthropic(req aRequest) ([]flatBlock, string, error) {
	var out []flatBlock
	prev := ""
	bps := 0
	add := func(b aBlock, tokens int) error {
		ttl := 5 * time.Minute
		cc, has := b["cache_control"]
		if has {
			var c struct {
				Type string `json:"type"`
				TTL  string `json:"ttl"`
			}
			if err := json.Unmarshal(cc, &c); err != nil || c.Type != "ephemeral" {
				return fmt.Errorf("cache_control: type must be \"ephemeral\"")
			}
			switch c.TTL {
			case "", "5m":
			case "1h":
				ttl = time.Hour
			default:
				return fmt.Errorf("cache_control.ttl: must be \"5m\" or \"1h\", got %q", c.TTL)
			}
			bps++
		}
		clean := aBlock{}
		for k, v := range b {
			if k != "cache_control" {
				clean[k] = v
			}
		}
		canonical, _ := json.Marshal(clean) // map keys marshal sorted: a stable canonical form
		prev = hashChain(prev, req.Model, canonical)
		out = append(out, flatBlock{tokens: tokens, hash: prev, bp: has, ttl: ttl})
		return nil
	}

	for _, t := range req.Tools {
		n := tokenize.Count(str(t["name"])) + tokenize.Count(str(t["description"])) + tokenize.Count(string(t["input_schema"]))
		if err := add(t, n); err != nil {
			return nil, "", fmt.Errorf("tools: %w", err)
		}
	}
	if len(req.System) > 0 && req.System[0] == '"' {
		var sys string
		_ = json.Unmarshal(req.System, &sys)
		if err := add(aBlock{"type": json.RawMessage(`"text"`), "text": req.System}, tokenize.Count(sys)); err != nil {
			return nil, "", err
		}
	} else if len(req.System) > 0 {
		var sys []aBlock
		if err := json.Unmarshal(req.System, &sys); err != nil {
			return nil, "", fmt.Errorf("system: %w", err)
		}
		for _, b := range sys {
			if err := add(b, tokenize.Count(str(b["text"]))); err != nil {
				return nil, "", fmt.Errorf("system: %w", err)
			}
		}
	}

	if len(req.Messages) == 0 {
		return nil, "", fmt.Errorf("messages: at least one message is required")
	}
	if req.Messages[0].Role != "user" {
		return nil, "", fmt.Errorf("messages: first message must use the \"user\" role")
	}
	lastText := ""
	var pendingToolUse []string // ids the previous assistant message asked for
	for i, m := range req.Messages {
		var blocks []aBlock
		if len(m.Content) > 0 && m.Content[0] == '"' {
			var text string
			_ = json.Unmarshal(m.Content, &text)
			raw, _ := json.Marshal(text)
			blocks = []aBlock{{"type": json.RawMessage(`"text"`), "text": raw}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, "", fmt.Errorf("messages.%d.content: %w", i, err)
		}
		var asked []string
		answered := map[string]bool{}
		var texts []string
		for j, b := range blocks {
			typ := str(b["type"])
			tokens := 0
			switch typ {
			case "text":
				tokens = tokenize.Count(str(b["text"]))
				texts = append(texts, str(b["text"]))
			case "tool_use":
				if m.Role != "assistant" {
					return nil, "", fmt.Errorf("messages.%d.content.%d: tool_use is only allowed in assistant messages", i, j)
				}
				var input map[string]any
				if err := json.Unmarshal(b["input"], &input); err != nil {
					return nil, "", fmt.Errorf("messages.%d.content.%d.input: Input should be a valid dictionary", i, j)
				}
				asked = append(asked, str(b["id"]))
				tokens = tokenize.Count(str(b["name"])) + tokenize.Count(string(b["input"]))
			case "tool_result":
				id := str(b["tool_use_id"])
				if !contains(pendingToolUse, id) {
					return nil, "", fmt.Errorf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", i, j, id)
				}
				answered[id] = true
				content := resultText(b["content"])
				texts = append(texts, content)
				tokens = tokenize.Count(content)
			default:
				tokens = tokenize.Count(string(mustJSON(b)))
			}
			if err := add(b, tokens); err != nil {
				return nil, "", fmt.Errorf("messages.%d.content.%d: %w", i, j, err)
			}
		}
		for _, id := range pendingToolUse {
			if !answered[id] {
				return nil, "", fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, id)
			}
		}
		pendingToolUse = asked
		if m.Role == "user" {
			lastText = strings.Join(texts, "\n")
		}
	}
	if bps > llm.MaxCacheBreakpoints {
		//lint:ignore ST1005 the API's own message, word for word
		return nil, "", fmt.Errorf("A maximum of %d blocks with cache_control may be provided. Found %d.", llm.MaxCacheBreakpoints, bps)
	}
	return out, lastText, nil
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func resultText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		return str(raw)
	}
	var parts []aBlock
	_ = json.Unmarshal(raw, &parts)
	var texts []string
	for _, p := range parts {
		texts = append(texts, str(p["text"]))
	}
	return strings.Join(texts, "\n")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
