package llmtest

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
)

// Session returns the request of step n of a tool-using loop, laid out as the executor lays it
// out: the tools, the system prompt and the newest message are marked for caching; each step is
// an echo call and its result. A provider's tests pass a system prompt over its cache minimum.
func Session(system string, tools []llm.ToolDef, task string, steps int) llm.Request {
	req := llm.Request{Tools: tools, CacheTools: true,
		System:   []llm.SystemBlock{{Text: system, Cache: true}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: task}}}}}
	for i := range steps {
		n := strconv.Itoa(i)
		id := "call_" + n
		req.Messages = append(req.Messages,
			llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse,
				ToolUse: &llm.ToolCall{ID: id, Name: "echo", Args: json.RawMessage(`{"text":"step ` + n + `"}`)}}}},
			llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult,
				ToolResult: &llm.ToolResult{CallID: id, Content: `{"ok":true,"result":"step ` + n + ` ` + strings.Repeat("data ", 40) + `"}`}}}})
	}
	req.Messages[len(req.Messages)-1].Cache = true
	return req
}

// Sink records what a streaming caller is told, and when: set a request's Stream to its Add.
type Sink struct {
	mu     sync.Mutex
	deltas []llm.Delta
	at     []time.Time
}

// Add records one delta.
func (s *Sink) Add(d llm.Delta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deltas, s.at = append(s.deltas, d), append(s.at, time.Now())
}

// Text is what a reader shows: the text since the last restart.
func (s *Sink) Text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, d := range s.deltas {
		if d.Restart {
			b.Reset()
		}
		b.WriteString(d.Text)
	}
	return b.String()
}

// Pieces is how many deltas came.
func (s *Sink) Pieces() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deltas)
}

// First is when the first delta came (zero if none did).
func (s *Sink) First() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.at) == 0 {
		return time.Time{}
	}
	return s.at[0]
}

// Restarts is how many times the caller was told to drop what it was shown.
func (s *Sink) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.deltas {
		if d.Restart {
			n++
		}
	}
	return n
}
