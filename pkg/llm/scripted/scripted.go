// Package scripted is the offline model: a YAML script of rules answers every call, so the
// whole mesh runs (and is tested) without a provider or a key. The format is Help (printed by
// `skein help script`).
//
// Counting `times` per conversation: a rule's uses are counted from the conversation itself,
// as the number of assistant turns in the request's transcript that are exactly that rule's
// reply (same text and the same tool calls with the same arguments). The count therefore
// belongs to one conversation, whatever else the backend serves: 50 concurrent sessions (even
// with identical tasks) each get the full script, a task run again starts afresh, and the
// backend holds no state. Two rules with identical replies share their count.
//
// Usage is counted with pkg/tokenize (o200k_base) on the rendered prompt (part by part) and the reply, so
// token figures mean something offline; the model name is "scripted", priced at 0, unless
// llm.model names another model: then replies carry that name, so its price applies (tests of
// money budgets run offline that way).
package scripted

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/config"
	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// Provider and Model name this backend.
const (
	Provider = "scripted"
	Model    = "scripted"
)

type fileRule struct {
	When *struct {
		System string `yaml:"system"`
		Last   string `yaml:"last"`
		Any    string `yaml:"any"`
		Tools  string `yaml:"tools"`
	} `yaml:"when"`
	Reply *struct {
		Text      string `yaml:"text"`
		ToolCalls []struct {
			Name    string    `yaml:"name"`
			Args    yaml.Node `yaml:"args"`
			ArgsRaw *string   `yaml:"args_raw"`
		} `yaml:"tool_calls"`
	} `yaml:"reply"`
	Times int `yaml:"times"`
	// DelayS makes the reply take this long, as a slow model would; the call's context ends it.
	DelayS float64 `yaml:"delay_s"`
	// ChunkMS paces the streamed text: this long between words (nil: the script's chunk_ms).
	ChunkMS *int `yaml:"chunk_ms"`
}

type rule struct {
	system, last, any, tools *regexp.Regexp
	text                     string
	calls                    []llm.ToolCall // IDs filled per answer
	times                    int            // 0: unlimited
	delay                    time.Duration
	chunk                    time.Duration // between streamed words
}

// Script is a parsed rule file.
type Script struct {
	name  string
	rules []rule
}

// Load reads and checks a script file.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scripted: reading script: %w", err)
	}
	return Parse(path, data)
}

// Parse checks a script; name (usually the file path) appears in every error.
func Parse(name string, data []byte) (*Script, error) {
	var doc struct {
		Rules   []fileRule `yaml:"rules"`
		ChunkMS int        `yaml:"chunk_ms"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("scripted: %s: empty script: it needs a rules: list", name)
		}
		return nil, fmt.Errorf("scripted: %s: %w", name, err)
	}
	if len(doc.Rules) == 0 {
		return nil, fmt.Errorf("scripted: %s: no rules: the script needs a non-empty rules: list", name)
	}
	if doc.ChunkMS < 0 {
		return nil, fmt.Errorf("scripted: %s: chunk_ms: must be >= 0, got %d", name, doc.ChunkMS)
	}
	s := &Script{name: name}
	for i, fr := range doc.Rules {
		at := func(field, format string, args ...any) error {
			return fmt.Errorf("scripted: %s: rules[%d]%s: %s", name, i, field, fmt.Sprintf(format, args...))
		}
		var r rule
		if fr.When != nil {
			var err error
			if r.system, err = compile(fr.When.System); err != nil {
				return nil, at(".when.system", "%v", err)
			}
			if r.last, err = compile(fr.When.Last); err != nil {
				return nil, at(".when.last", "%v", err)
			}
			if r.any, err = compile(fr.When.Any); err != nil {
				return nil, at(".when.any", "%v", err)
			}
			if r.tools, err = compile(fr.When.Tools); err != nil {
				return nil, at(".when.tools", "%v", err)
			}
		}
		if fr.Reply == nil {
			return nil, at("", "reply is required")
		}
		if fr.Reply.Text == "" && len(fr.Reply.ToolCalls) == 0 {
			return nil, at(".reply", "needs text or tool_calls")
		}
		r.text = fr.Reply.Text
		for j, tc := range fr.Reply.ToolCalls {
			field := fmt.Sprintf(".reply.tool_calls[%d]", j)
			if tc.Name == "" {
				return nil, at(field, "name is required")
			}
			var args json.RawMessage
			switch {
			case tc.ArgsRaw != nil && tc.Args.Kind != 0:
				return nil, at(field, "args and args_raw are exclusive")
			case tc.ArgsRaw != nil:
				args = json.RawMessage(*tc.ArgsRaw)
			case tc.Args.Kind == 0:
				args = json.RawMessage(`{}`)
			case tc.Args.Kind != yaml.MappingNode:
				return nil, at(field+".args", "must be a map (line %d)", tc.Args.Line)
			default:
				var m map[string]any
				if err := tc.Args.Decode(&m); err != nil {
					return nil, at(field+".args", "%v", err)
				}
				b, err := json.Marshal(m)
				if err != nil {
					return nil, at(field+".args", "not representable as JSON: %v", err)
				}
				args = b
			}
			r.calls = append(r.calls, llm.ToolCall{Name: tc.Name, Args: args})
		}
		if fr.Times < 0 {
			return nil, at(".times", "must be 1 or more, got %d", fr.Times)
		}
		r.times = fr.Times
		if fr.DelayS < 0 {
			return nil, at(".delay_s", "must be >= 0, got %v", fr.DelayS)
		}
		r.delay = time.Duration(fr.DelayS * float64(time.Second))
		chunk := doc.ChunkMS
		if fr.ChunkMS != nil {
			if chunk = *fr.ChunkMS; chunk < 0 {
				return nil, at(".chunk_ms", "must be >= 0, got %d", chunk)
			}
		}
		r.chunk = time.Duration(chunk) * time.Millisecond
		s.rules = append(s.rules, r)
	}
	return s, nil
}

func compile(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid regular expression: %w", err)
	}
	return re, nil
}

// Backend answers from a Script.
type Backend struct {
	script *Script
	model  string
}

var _ llm.Backend = (*Backend)(nil)

// New loads cfg.Script.
func New(cfg config.LLM, _ ...llm.Option) (*Backend, error) {
	if cfg.Script == "" {
		return nil, fmt.Errorf("scripted: llm.script is not set: point it at a rules file")
	}
	s, err := Load(cfg.Script)
	if err != nil {
		return nil, err
	}
	b := &Backend{script: s}
	if cfg.Model != "" && cfg.Model != Model {
		b.model = cfg.Model
	}
	return b, nil
}

// FromScript serves an already parsed script.
func FromScript(s *Script) *Backend { return &Backend{script: s} }

// Provider implements llm.Backend.
func (b *Backend) Provider() string { return Provider }

// Complete implements llm.Backend.
func (b *Backend) Complete(ctx context.Context, req llm.Request) (*llm.Response, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scripted: %w", err)
	}
	system := systemText(req)
	last := lastText(req)
	turn := 0
	for _, m := range req.Messages {
		if m.Role == llm.RoleAssistant {
			turn++
		}
	}
	for i := range b.script.rules {
		r := &b.script.rules[i]
		if r.system != nil && !r.system.MatchString(system) {
			continue
		}
		if r.last != nil && !r.last.MatchString(last) {
			continue
		}
		if r.any != nil && !r.any.MatchString(conversationText(req.Messages)) {
			continue
		}
		if r.tools != nil && !r.tools.MatchString(toolNames(req)) {
			continue
		}
		if r.times > 0 && usesIn(r, req.Messages) >= r.times {
			continue
		}
		if r.delay > 0 {
			t := time.NewTimer(r.delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("scripted: %w", context.Cause(ctx))
			}
		}
		if err := stream(ctx, req.Stream, r.text, r.chunk); err != nil {
			return nil, err
		}
		resp := &llm.Response{Text: r.text, Model: cmp.Or(b.model, Model), StopReason: llm.StopEndTurn}
		out := tokenize.Count(r.text)
		var groups []string
		if r.last != nil {
			groups = r.last.FindStringSubmatch(last)
		}
		for j, c := range r.calls {
			c.ID = fmt.Sprintf("call_%d_%d", turn, j)
			c.Args = substitute(c.Args, groups)
			resp.ToolCalls = append(resp.ToolCalls, c)
			out += tokenize.Count(c.Name) + tokenize.Count(string(c.Args))
		}
		if len(resp.ToolCalls) > 0 {
			resp.StopReason = llm.StopToolUse
		}
		resp.Usage = protocol.Usage{InputTokens: int64(promptTokens(req)), OutputTokens: int64(max(out, 1))}
		resp.Latency = time.Since(start)
		return resp, nil
	}
	return nil, fmt.Errorf("scripted: no rule in %s matches the conversation (newest message: %q)", b.script.name, quoteStart(last, 80))
}

// stream hands text to sink a word (and the spaces after it) at a time, pause apart.
func stream(ctx context.Context, sink func(llm.Delta), text string, pause time.Duration) error {
	if sink == nil || text == "" {
		return nil
	}
	start := 0
	for i := 1; i <= len(text); i++ {
		if i < len(text) && (!isSpace(text[i-1]) || isSpace(text[i])) {
			continue
		}
		if start > 0 && pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("scripted: %w", context.Cause(ctx))
			}
		}
		sink(llm.Delta{Text: text[start:i]})
		start = i
	}
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' }

// capture is an argument value standing for a capture group of when.last.
var capture = regexp.MustCompile(`"\$([1-9])"`)

// substitute fills "$N" argument values with the capture groups of when.last.
func substitute(args json.RawMessage, groups []string) json.RawMessage {
	out := append(json.RawMessage(nil), args...)
	if len(groups) < 2 {
		return out
	}
	return capture.ReplaceAllFunc(out, func(m []byte) []byte {
		n := int(m[2] - '0')
		if n >= len(groups) {
			return m
		}
		g := groups[n]
		if _, err := strconv.ParseFloat(g, 64); err == nil && json.Valid([]byte(g)) {
			return []byte(g)
		}
		b, _ := json.Marshal(g)
		return b
	})
}

// usesIn counts the assistant turns of the transcript that are exactly r's reply.
func usesIn(r *rule, msgs []llm.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role != llm.RoleAssistant {
			continue
		}
		var text []string
		var calls []llm.ToolCall
		for _, blk := range m.Content {
			switch blk.Type {
			case llm.BlockText:
				text = append(text, blk.Text)
			case llm.BlockToolUse:
				if blk.ToolUse != nil {
					calls = append(calls, *blk.ToolUse)
				}
			}
		}
		if strings.TrimSpace(strings.Join(text, "")) != strings.TrimSpace(r.text) || len(calls) != len(r.calls) {
			continue
		}
		same := true
		for j, c := range calls {
			if c.Name != r.calls[j].Name || !sameJSON(c.Args, r.calls[j].Args) {
				same = false
				break
			}
		}
		if same {
			n++
		}
	}
	return n
}

func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

func systemText(req llm.Request) string {
	parts := make([]string, len(req.System))
	for i, s := range req.System {
		parts[i] = s.Text
	}
	return strings.Join(parts, "\n\n")
}

// toolNames are the names of the tools the request offers, one per line (when.tools).
func toolNames(req llm.Request) string {
	names := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		names[i] = t.Name
	}
	return strings.Join(names, "\n")
}

// lastText is the newest user message: its text and tool results.
func lastText(req llm.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != llm.RoleUser {
			continue
		}
		// Text first, then tool results: a conversation's follow-up carries both (the answers to
		// the calls its previous turn ended with, then the new message), and rules match the text.
		var text, results []string
		for _, blk := range m.Content {
			switch {
			case blk.Type == llm.BlockText:
				text = append(text, blk.Text)
			case blk.Type == llm.BlockToolResult && blk.ToolResult != nil:
				results = append(results, blk.ToolResult.Content)
			}
		}
		return strings.Join(append(text, results...), "\n")
	}
	return ""
}

// promptTokens counts the prompt as laid out by render, one part at a time: the tools and system
// prompt, then each message. tokenize.Count remembers each part's count, so a conversation's
// earlier messages are not tokenized again every turn.
func promptTokens(req llm.Request) int {
	var sb strings.Builder
	for _, t := range req.Tools {
		sb.WriteString(t.Name + "\n" + t.Description + "\n" + string(t.InputSchema) + "\n")
	}
	sb.WriteString(systemText(req))
	n := tokenize.Count(sb.String())
	for _, m := range req.Messages {
		n += tokenize.Count(renderMessage(m))
	}
	return n
}

// conversationText is every message laid out as the token count renders it (when.any).
func conversationText(msgs []llm.Message) string {
	var sb strings.Builder
	for _, m := range msgs {
		sb.WriteString(renderMessage(m))
	}
	return sb.String()
}

// renderMessage lays one message out as text for counting.
func renderMessage(m llm.Message) string {
	var sb strings.Builder
	sb.WriteString("\n" + string(m.Role) + ":\n")
	for _, blk := range m.Content {
		switch {
		case blk.Type == llm.BlockText:
			sb.WriteString(blk.Text)
		case blk.Type == llm.BlockToolUse && blk.ToolUse != nil:
			sb.WriteString(blk.ToolUse.Name + " " + string(blk.ToolUse.Args))
		case blk.Type == llm.BlockToolResult && blk.ToolResult != nil:
			sb.WriteString(blk.ToolResult.Content)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func quoteStart(s string, n int) string {
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
