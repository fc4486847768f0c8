package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The memory tools (memory.session_tools): remember stores a note in this agent's memory,
// recall searches it. Both go through memoryd, so a note meets the same redaction, length cap,
// dedup and promotion as a mined guideline, and recalled text is fenced as reference data.

var rememberDef = llm.ToolDef{
	Name: protocol.ToolRemember,
	Description: "Store a short note in this agent's memory for later sessions: a fact you found or a lesson about " +
		"how to do this kind of task. One self-contained sentence; no secrets.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"note":{"type":"string","minLength":1,"description":"The note, one self-contained sentence."}},"required":["note"],"additionalProperties":false}`),
}

var recallDef = llm.ToolDef{
	Name:        protocol.ToolRecall,
	Description: "Search this agent's memory (notes, findings of sub-agents, lessons from past runs) for what fits a query.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","minLength":1,"description":"What you want to know, in a few words."}},"required":["query"],"additionalProperties":false}`),
}

// memoryTools reports whether this agent's steps are offered remember and recall.
func (e *Executor) memoryTools() bool {
	m := e.d.Config.Memory
	return m.Enabled && m.SessionTools
}

func memToolFailure(kind, format string, a ...any) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: kind, Error: fmt.Sprintf(format, a...)}}
}

// remember stores one note with this session as its evidence. The key is the note's text, so
// the same note from a redelivered step is counted once.
func (r *run) remember(ctx context.Context, c llm.ToolCall) protocol.ToolReply {
	var args struct {
		Note string `json:"note"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil || strings.TrimSpace(args.Note) == "" {
		return memToolFailure(protocol.ToolErrBadArgs, `remember needs {"note": "one self-contained sentence"}`)
	}
	req := protocol.RememberRequest{Agent: r.e.d.Config.MemoryAgent(), SessionID: r.step.SessionID, Source: protocol.SourceRemembered,
		Notes: []protocol.RememberNote{{Text: args.Note}}}
	var rep protocol.RememberReply
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bus.Request(rctx, r.e.d.Conn.NC, r.e.d.Names.Memory(protocol.MemRemember), &req, &rep, 10*time.Second); err != nil {
		return memToolFailure(protocol.ToolErrUnavailable, "memory did not answer: %v", err)
	}
	if err := rep.Err(); err != nil && len(rep.Actions) == 0 {
		return memToolFailure(protocol.ToolErrToolError, "memory refused the note: %v", err)
	}
	if len(rep.Actions) != 1 {
		return memToolFailure(protocol.ToolErrToolError, "memory answered %d actions for one note", len(rep.Actions))
	}
	a := rep.Actions[0]
	switch a.Action {
	case "refused", "error":
		return memToolFailure(protocol.ToolErrToolError, "the note was not stored: %s", a.Detail)
	}
	res, _ := json.Marshal(map[string]string{"stored": a.EntryID, "action": a.Action})
	return protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true, Result: res}}
}

// recall searches this agent's memory. What comes back is fenced and labelled with its origin,
// like the guidelines in the prompt: reference data, never instructions.
func (r *run) recall(ctx context.Context, c llm.ToolCall) protocol.ToolReply {
	var args struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil || strings.TrimSpace(args.Query) == "" {
		return memToolFailure(protocol.ToolErrBadArgs, `recall needs {"query": "what you want to know"}`)
	}
	req := protocol.RetrieveRequest{Agent: r.e.d.Config.MemoryAgent(), Task: args.Query, TopK: r.e.d.Config.Memory.TopK, SessionID: r.step.SessionID}
	var rep protocol.RetrieveReply
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bus.Request(rctx, r.e.d.Conn.NC, r.e.d.Names.Memory(protocol.MemRetrieve), &req, &rep, 10*time.Second); err != nil {
		return memToolFailure(protocol.ToolErrUnavailable, "memory did not answer: %v", err)
	}
	if err := rep.Err(); err != nil {
		return memToolFailure(protocol.ToolErrToolError, "memory: %v", err)
	}
	type found struct {
		Text   string `json:"text"`
		Origin string `json:"origin"`
	}
	out := struct {
		Note  string  `json:"note"`
		Found []found `json:"found"`
	}{Note: retrieve.Preamble, Found: []found{}}
	for _, g := range rep.Guidelines {
		out.Found = append(out.Found, found{Text: retrieve.Sanitize(g.Text), Origin: retrieve.Origin(g)})
	}
	res, _ := json.Marshal(out)
	return protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true, Result: res}}
}
