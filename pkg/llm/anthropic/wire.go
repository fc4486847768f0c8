package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	llm "github.com/skein-mesh/skein/pkg/llm/core"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// breakpoint is one place a cache_control marker may go.
type breakpoint struct {
	where  string // for logs: "tools", "system[1]", "messages[4]"
	tokens int    // size of the prompt prefix up to and including it
	set    func(sdk.CacheControlEphemeralParam)
}

func (b *Backend) buildParams(req llm.Request) (sdk.MessageNewParams, error) {
	p := sdk.MessageNewParams{Model: sdk.Model(req.Model)}
	var candidates []breakpoint
	tokens := 0

	// Tools come first in the prompt, then system, then messages: the order of the cache prefix.
	for i, t := range req.Tools {
		schema, err := inputSchema(t.InputSchema)
		if err != nil {
			return p, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		tp := &sdk.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tp})
		tokens += tokenize.Count(t.Name) + tokenize.Count(t.Description) + tokenize.Count(string(t.InputSchema))
		if i == len(req.Tools)-1 && req.CacheTools {
			candidates = append(candidates, breakpoint{where: "tools", tokens: tokens,
				set: func(c sdk.CacheControlEphemeralParam) { tp.CacheControl = c }})
		}
	}
	if len(req.System) > 0 {
		p.System = make([]sdk.TextBlockParam, len(req.System))
	}
	for i, s := range req.System {
		p.System[i] = sdk.TextBlockParam{Text: s.Text}
		tokens += tokenize.Count(s.Text)
		if s.Cache {
			blk := &p.System[i]
			candidates = append(candidates, breakpoint{where: fmt.Sprintf("system[%d]", i), tokens: tokens,
				set: func(c sdk.CacheControlEphemeralParam) { blk.CacheControl = c }})
		}
	}
	for i, m := range req.Messages {
		blocks := make([]sdk.ContentBlockParamUnion, 0, len(m.Content))
		for _, blk := range m.Content {
			u, n, err := contentBlock(blk)
			if err != nil {
				return p, fmt.Errorf("messages[%d]: %w", i, err)
			}
			blocks = append(blocks, u)
			tokens += n
		}
		if len(blocks) == 0 {
			return p, fmt.Errorf("messages[%d]: empty content", i)
		}
		var mp sdk.MessageParam
		switch m.Role {
		case llm.RoleUser:
			mp = sdk.MessageParam{OfUser: &sdk.UserMessageParam{Content: blocks}}
		case llm.RoleAssistant:
			mp = sdk.MessageParam{OfAssistant: &sdk.AssistantMessageParam{Content: blocks}}
		default:
			return p, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		p.Messages = append(p.Messages, mp)
		if m.Cache {
			last := &blocks[len(blocks)-1]
			candidates = append(candidates, breakpoint{where: fmt.Sprintf("messages[%d]", i), tokens: tokens,
				set: func(c sdk.CacheControlEphemeralParam) { setCache(last, c) }})
		}
	}
	b.placeBreakpoints(req, candidates)
	return p, nil
}

// placeBreakpoints applies the cache policy: nothing when caching is off; no marker on a
// prefix under the model's minimum (the provider would ignore it); at most four, keeping the
// newest.
func (b *Backend) placeBreakpoints(req llm.Request, candidates []breakpoint) {
	if b.cfg.Cache == "off" || len(candidates) == 0 {
		return
	}
	minTokens := llm.MinCacheableTokens(req.Model)
	kept := candidates[:0:0]
	for _, c := range candidates {
		if c.tokens < minTokens {
			b.opts.Logger.Info("prompt prefix under the model's minimum cacheable length: cache marker not sent",
				"provider", Provider, "model", req.Model, "at", c.where, "prefix_tokens", c.tokens, "min_tokens", minTokens)
			continue
		}
		kept = append(kept, c)
	}
	if extra := len(kept) - llm.MaxCacheBreakpoints; extra > 0 {
		var dropped []string
		for _, c := range kept[:extra] {
			dropped = append(dropped, c.where)
		}
		b.opts.Logger.Debug("more cache markers than the provider allows: dropping the earliest",
			"provider", Provider, "dropped", strings.Join(dropped, ","))
		kept = kept[extra:]
	}
	ttl := req.CacheTTL
	if ttl == "" {
		ttl = b.cfg.CacheTTL
	}
	// The constructor marks the param as set, so the marker is sent even with the default TTL.
	cc := sdk.NewCacheControlEphemeralParam()
	if ttl == "1h" {
		// 5m is the provider's default and is left implicit.
		cc.TTL = sdk.CacheControlEphemeralTTLTTL1h
	}
	for _, c := range kept {
		c.set(cc)
	}
}

func setCache(u *sdk.ContentBlockParamUnion, c sdk.CacheControlEphemeralParam) {
	switch {
	case u.OfText != nil:
		u.OfText.CacheControl = c
	case u.OfToolUse != nil:
		u.OfToolUse.CacheControl = c
	case u.OfToolResult != nil:
		u.OfToolResult.CacheControl = c
	}
}

// contentBlock maps one block and returns its approximate token size.
func contentBlock(b llm.Block) (sdk.ContentBlockParamUnion, int, error) {
	switch b.Type {
	case llm.BlockText:
		return sdk.NewTextBlock(b.Text), tokenize.Count(b.Text), nil
	case llm.BlockToolUse:
		if b.ToolUse == nil {
			return sdk.ContentBlockParamUnion{}, 0, fmt.Errorf("tool_use block without a call")
		}
		args := b.ToolUse.Args
		if !b.ToolUse.ValidArgs() {
			// The model once sent arguments that were not an object; the API only accepts an
			// object here, and the paired tool_result already tells the model what went wrong.
			args = json.RawMessage(`{}`)
		}
		return sdk.NewToolUseBlock(b.ToolUse.ID, args, b.ToolUse.Name),
			tokenize.Count(b.ToolUse.Name) + tokenize.Count(string(args)), nil
	case llm.BlockToolResult:
		if b.ToolResult == nil {
			return sdk.ContentBlockParamUnion{}, 0, fmt.Errorf("tool_result block without a result")
		}
		r := b.ToolResult
		tr := sdk.ToolResultBlockParam{ToolUseID: r.CallID,
			Content: []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: r.Content}}}}
		if r.IsError {
			tr.IsError = sdk.Bool(true)
		}
		return sdk.ContentBlockParamUnion{OfToolResult: &tr}, tokenize.Count(r.Content), nil
	default:
		return sdk.ContentBlockParamUnion{}, 0, fmt.Errorf("unknown block type %q", b.Type)
	}
}

// inputSchema carries a tool's JSON schema over unchanged.
func inputSchema(raw json.RawMessage) (sdk.ToolInputSchemaParam, error) {
	var s sdk.ToolInputSchemaParam
	if len(raw) == 0 {
		return s, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return s, fmt.Errorf("input_schema is not a JSON object: %w", err)
	}
	if props, ok := m["properties"]; ok {
		s.Properties = props
	}
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				s.Required = append(s.Required, name)
			}
		}
	}
	extra := map[string]any{}
	for k, v := range m {
		if k != "properties" && k != "required" && k != "type" {
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		s.ExtraFields = extra
	}
	return s, nil
}

// fromMessage maps an answer; inputs, when it has an entry for a tool_use block's index, holds
// that call's arguments as they were streamed.
func fromMessage(m *sdk.Message, inputs map[int64][]byte) *llm.Response {
	r := &llm.Response{Model: string(m.Model), Usage: protocol.Usage{
		InputTokens:              m.Usage.InputTokens,
		OutputTokens:             m.Usage.OutputTokens,
		CacheCreationInputTokens: m.Usage.CacheCreationInputTokens,
		CacheReadInputTokens:     m.Usage.CacheReadInputTokens,
	}}
	var text []string
	for i, c := range m.Content {
		switch c.Type {
		case "text":
			text = append(text, c.Text)
		case "tool_use":
			args := c.Input
			if raw, ok := inputs[int64(i)]; ok && len(raw) > 0 {
				args = raw
			}
			// Arguments that arrive as a JSON string are passed on as the raw text, so the
			// executor can show the model exactly what it sent.
			if len(args) > 0 && args[0] == '"' {
				var s string
				if json.Unmarshal(args, &s) == nil {
					args = json.RawMessage(s)
				}
			}
			r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Name, Args: append(json.RawMessage(nil), args...)})
		}
	}
	r.Text = strings.Join(text, "")
	switch m.StopReason {
	case sdk.StopReasonEndTurn, sdk.StopReasonStopSequence:
		r.StopReason = llm.StopEndTurn
	case sdk.StopReasonToolUse:
		r.StopReason = llm.StopToolUse
	case sdk.StopReasonMaxTokens:
		r.StopReason = llm.StopMaxTokens
	default:
		r.StopReason = llm.StopOther
	}
	return r
}
