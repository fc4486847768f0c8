// Package llmtest runs local fake model servers that speak the providers' real wire formats,
// for tests and benchmarks of anything that calls a model:
//
//   - NewAnthropic: the Messages API (POST /v1/messages). It computes prompt caching as the
//     provider does: cache_control breakpoints (at most 4), a hash of the prompt content up to
//     each breakpoint, the model's minimum cacheable length, a lookback of 20 blocks for
//     earlier cached prefixes, TTLs of 5m or 1h, and usage split into input, cache creation
//     and cache read tokens.
//   - NewOpenAI: chat completions (POST /v1/chat/completions), with automatic prefix caching
//     reported as usage.prompt_tokens_details.cached_tokens (prefixes of 1,024 tokens and up,
//     in 128-token steps).
//
// Both answer from a Script (text, tool calls, malformed tool arguments) and inject faults:
// an HTTP error status with retry-after (429, 500, 529), a reset connection, a reply cut at
// max_tokens. Both validate tool_use/tool_result pairing and answer 400 like the provider
// when it is broken. Token counts come from pkg/tokenize, so figures are realistic.
//
// A request with "stream": true is answered as the provider streams: server-sent events of
// the same answer, in the provider's own event sequence (Anthropic: message_start,
// content_block_start, ping, content_block_delta with text_delta or input_json_delta,
// content_block_stop, message_delta with the stop reason and the usage, message_stop;
// OpenAI: chat.completion.chunk objects, the finish reason in the last choice chunk, then, with
// stream_options.include_usage, a chunk of usage alone, then [DONE]). The text goes a word per
// chunk and tool arguments a few bytes per chunk; Reply.ChunkDelay paces the chunks (a slow
// model) and Reply.CutAfter breaks the stream after that many chunks (a failing network).
package llmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// ToolCall is a scripted tool call. Args is marshalled to a JSON object; ArgsRaw, when set, is
// sent verbatim instead (use it for malformed arguments).
type ToolCall struct {
	Name    string
	Args    map[string]any
	ArgsRaw string
}

// Reply is one scripted answer, or one fault.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	// OutputTokens overrides the counted size of the reply. A reply larger than the request's
	// max_tokens is cut there (stop_reason max_tokens, tool calls dropped), as a model would be.
	OutputTokens int

	// Faults. Status answers with that HTTP error (and RetryAfter as the retry-after header);
	// Reset closes the connection without answering; CutAtMaxTokens forces a max_tokens stop;
	// Delay holds the answer back (or until the client gives up), to trip deadlines.
	Delay          time.Duration
	Status         int
	RetryAfter     string
	Reset          bool
	CutAtMaxTokens bool

	// Streamed answers only. ChunkDelay is the wait before each content chunk. CutAfter > 0
	// breaks the stream once that many content chunks are out: the connection is dropped
	// (the client reads an unexpected EOF), or, with CutClean, the response ends as if complete
	// but without the provider's closing events (a proxy that gave up).
	ChunkDelay time.Duration
	CutAfter   int
	CutClean   bool
}

// Request is what a Respond function sees of an incoming call.
type Request struct {
	N         int // 0-based index of this call on the server
	Model     string
	MaxTokens int
	// LastText is the text of the newest user message (tool results included).
	LastText string
	Body     []byte
}

// Script answers calls: Replies in order, one per call (faults included); once they run out,
// Respond answers if set, else a plain "done." that ends the turn.
type Script struct {
	Replies []Reply
	Respond func(Request) Reply
}

// Recorded is one call the server received.
type Recorded struct {
	N      int // the call's index on the server (Requests are in this order)
	Body   []byte
	Header http.Header
	Reply  Reply
	// Status is the HTTP status answered (0 for a reset connection).
	Status int
	// Usage is what the answer reported (zero for faults and cut streams).
	Usage protocol.Usage
	// Streamed: the answer went as server-sent events; Cut: its stream was broken on purpose.
	Streamed, Cut bool
}

// Server is a running fake.
type Server struct {
	// URL is the base URL to configure the SDK with (llm.base_url).
	URL string

	srv    *httptest.Server
	script Script

	mu       sync.Mutex
	n        int
	recorded []Recorded
	totals   protocol.Usage
	cache    *prefixCache
}

func newServer(t testing.TB, script Script, handler func(s *Server) http.Handler, urlSuffix string) *Server {
	s := &Server{script: script, cache: newPrefixCache()}
	s.srv = httptest.NewServer(handler(s))
	s.URL = s.srv.URL + urlSuffix
	if t != nil {
		t.Cleanup(s.Close)
	}
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests returns every call received so far.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.recorded...)
}

// Calls counts the calls received (faults included).
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Totals sums the usage reported in successful answers.
func (s *Server) Totals() protocol.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals
}

// ResetCache forgets every cached prefix (a cold provider cache).
func (s *Server) ResetCache() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = newPrefixCache()
}

// next picks the reply for a call and reserves its index.
func (s *Server) next(model string, maxTokens int, lastText string, body []byte) (int, Reply) {
	s.mu.Lock()
	n := s.n
	s.n++
	s.mu.Unlock()
	if n < len(s.script.Replies) {
		return n, s.script.Replies[n]
	}
	if s.script.Respond != nil {
		return n, s.script.Respond(Request{N: n, Model: model, MaxTokens: maxTokens, LastText: lastText, Body: body})
	}
	return n, Reply{Text: "done."}
}

// record keeps a call in the order calls arrived: a streamed answer is recorded when its stream
// ends, which may be after its client sent the next call.
func (s *Server) record(r Recorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.recorded), func(i int) bool { return s.recorded[i].N > r.N })
	s.recorded = slices.Insert(s.recorded, i, r)
	s.totals = s.totals.Add(r.Usage)
}

// resetConn drops the connection with a TCP reset, as a failing proxy or server would.
func resetConn(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("llmtest: response writer cannot hijack")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// outputOf counts a reply's tokens and applies the max_tokens cut.
func outputOf(r Reply, maxTokens int) (text string, calls []ToolCall, tokens int, cut bool) {
	text, calls = r.Text, r.ToolCalls
	tokens = r.OutputTokens
	if tokens == 0 {
		tokens = tokenize.Count(text)
		for _, c := range calls {
			tokens += tokenize.Count(c.Name) + tokenize.Count(argsString(c))
		}
		tokens = max(tokens, 1)
	}
	if r.CutAtMaxTokens || (maxTokens > 0 && tokens > maxTokens) {
		if maxTokens > 0 {
			tokens = min(tokens, maxTokens)
		}
		text, _ = tokenize.Truncate(text, tokens)
		return text, nil, tokens, true
	}
	return text, calls, tokens, false
}

func argsString(c ToolCall) string {
	if c.ArgsRaw != "" {
		return c.ArgsRaw
	}
	if c.Args == nil {
		return "{}"
	}
	b, _ := json.Marshal(c.Args)
	return string(b)
}

func hashChain(prev, model string, canonical []byte) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{0})
	h.Write([]byte(model))
	h.Write([]byte{0})
	h.Write(canonical)
	return hex.EncodeToString(h.Sum(nil))
}

// delay holds a reply back for d, or until the client goes away.
func delay(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// sse writes a streamed answer: events flushed one by one, content chunks paced and counted,
// the stream cut where the reply says.
type sse struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	reply Reply
	n     int  // content chunks written
	cut   bool // the stream was cut (write nothing more)
	// atEnd runs once, just before the stream's last event: a call is recorded before its
	// client can see it end, so a test reading Requests after a call returns finds it there.
	atEnd func()
}

// last writes the stream's last event, after atEnd.
func (s *sse) last(name string, data any) bool {
	if s.cut || s.ctx.Err() != nil {
		return false
	}
	if s.atEnd != nil {
		s.atEnd()
		s.atEnd = nil
	}
	return s.event(name, data)
}

// streamed writes a streamed answer with write and records it: as complete (with usage) just
// before its last event, or, when the stream was cut before that, as cut.
func (s *Server) streamed(st *sse, rec Recorded, usage protocol.Usage, write func(*sse) bool) {
	done := false
	st.atEnd = func() {
		rec.Usage = usage
		s.record(rec)
		done = true
	}
	write(st)
	if !done {
		rec.Cut = true
		s.record(rec)
	}
}

func newSSE(w http.ResponseWriter, r *http.Request, reply Reply) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w), ctx: r.Context(), reply: reply}
}

// event writes one event (name "" for data-only events, as OpenAI sends them); it reports
// whether the stream goes on.
func (s *sse) event(name string, data any) bool {
	if s.cut || s.ctx.Err() != nil {
		return false
	}
	b, ok := data.([]byte)
	if !ok {
		b, _ = json.Marshal(data)
	}
	if name != "" {
		_, _ = fmt.Fprintf(s.w, "event: %s\n", name)
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// chunk writes one content event after the reply's ChunkDelay, then cuts the stream if it was
// the CutAfter-th.
func (s *sse) chunk(name string, data any) bool {
	delay(s.ctx, s.reply.ChunkDelay)
	if !s.event(name, data) {
		return false
	}
	s.n++
	if s.reply.CutAfter > 0 && s.n >= s.reply.CutAfter {
		s.cut = true
		if !s.reply.CutClean {
			resetConn(s.w)
		}
		return false
	}
	return true
}

// words splits text into chunks of one word and the spaces after it, as models stream text.
func words(text string) []string {
	var out []string
	start := 0
	for i := 1; i < len(text); i++ {
		if text[i-1] == ' ' || text[i-1] == '\n' {
			if text[i] != ' ' && text[i] != '\n' {
				out = append(out, text[start:i])
				start = i
			}
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// pieces splits s into pieces of about n bytes, never inside a UTF-8 sequence.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" || len(out) == 0 {
		out = append(out, s)
	}
	return out
}
