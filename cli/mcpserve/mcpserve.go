// Package mcpserve offers skein agents to MCP clients (`skein mcp serve`): each agent is an MCP
// tool, described as it is offered to other agents as a tool, whose call runs one session
// through the gateway, so budgets, cancel, lineage and memory apply as to any session.
package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/toolhost"
)

// Defaults of Options' zero fields.
const (
	DefaultMaxCalls = 16
	// DefaultWait is how long a call waits for its session, as an agent tool waits for a child.
	DefaultWait = toolhost.DefaultAgentWait
	// maxProgressMessage bounds the trace line a progress notification carries.
	maxProgressMessage = 300
)

// Caller marks the sessions MCP clients start, in the gateway's session_started event.
const Caller = "mcp"

// Options shape a Server.
type Options struct {
	// Version is what the server tells clients it is.
	Version string
	// MaxCalls bounds the calls running at once (0: DefaultMaxCalls); one over it is refused.
	MaxCalls int
	// Wait bounds how long a call waits for its session to end (0: DefaultWait); the session
	// is then cancelled.
	Wait time.Duration
	// Cancel cancels a session (the CLI's cancel: through the gateway, or the records when no
	// gateway answers).
	Cancel func(ctx context.Context, session, reason string) error
	Logger *slog.Logger
}

// Server is the MCP server of a set of agents.
type Server struct {
	conn  *bus.Conn
	names protocol.Names
	opts  Options
	slots chan struct{}
	mcp   *mcp.Server
	calls sync.WaitGroup
}

// New makes the MCP server of agents on the mesh at conn: one tool per agent, declared from its
// registration and declared again whenever that changes (clients are told the list changed),
// until ctx ends.
func New(ctx context.Context, conn *bus.Conn, names protocol.Names, agents []string, opts Options) (*Server, error) {
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultMaxCalls
	}
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Cancel == nil {
		return nil, errors.New("mcpserve: no way to cancel a session")
	}
	for _, a := range agents {
		if err := protocol.IDAgent.Check(a); err != nil {
			return nil, err
		}
	}
	agents = slices.Compact(slices.Sorted(slices.Values(agents)))
	s := &Server{conn: conn, names: names, opts: opts, slots: make(chan struct{}, opts.MaxCalls),
		mcp: mcp.NewServer(&mcp.Implementation{Name: "skein", Version: opts.Version}, nil)}
	kv, err := bus.KV(ctx, conn.JS, names, protocol.BucketAgents)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: agent registrations: %w", err)
	}
	// WatchFiltered writes the subjects over the keys it is given: hand it a copy.
	w, err := kv.WatchFiltered(ctx, slices.Clone(agents))
	if err != nil {
		return nil, fmt.Errorf("mcpserve: watch agent registrations: %w", err)
	}
	regs := map[string]*protocol.AgentSpec{}
	for e := range w.Updates() {
		if e == nil {
			break // the registrations that exist are in
		}
		if reg, ok := toolhost.DecodeRegistration(e); ok {
			regs[e.Key()] = reg
		}
	}
	declared := map[string]protocol.ToolSpec{}
	for _, a := range agents {
		if regs[a] == nil {
			opts.Logger.Warn("agent not registered on the mesh yet: offered with {task} until it starts and declares itself", "agent", a)
		}
		declared[a] = s.declare(a, regs[a])
	}
	// Heartbeats rewrite a registration every few seconds; only a new declaration changes the tool.
	go func() {
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			reg, ok := toolhost.DecodeRegistration(e)
			if !ok {
				continue
			}
			next := toolhost.DeclareAgent(e.Key(), opts.Wait, reg, opts.Logger).Spec()
			if prev := declared[e.Key()]; prev.Description != next.Description || string(prev.InputSchema) != string(next.InputSchema) {
				declared[e.Key()] = s.declare(e.Key(), reg)
			}
		}
	}()
	return s, nil
}

// MCP is the server to run on a transport.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Drain waits, at most d, for the calls still running to end: once the transport is gone (the
// client left, or the server is stopping) each cancels its session, which must be asked before
// the process exits.
func (s *Server) Drain(d time.Duration) {
	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		s.opts.Logger.Warn("MCP calls still running at exit; their sessions may run on (see `skein trace list`)", "waited", d)
	}
}

// declare (re)adds agent's tool; the SDK tells connected clients the list changed.
func (s *Server) declare(agent string, reg *protocol.AgentSpec) protocol.ToolSpec {
	decl := toolhost.DeclareAgent(agent, s.opts.Wait, reg, s.opts.Logger)
	spec := decl.Spec()
	s.mcp.AddTool(&mcp.Tool{Name: agent, Description: spec.Description, InputSchema: spec.InputSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return s.call(ctx, decl, agent, req)
		})
	return spec
}

// Answer is a call's structured content.
type Answer struct {
	SessionID string           `json:"session_id"`
	Outcome   protocol.Outcome `json:"outcome"`
	FinalText string           `json:"final_text"`
	Reason    string           `json:"reason,omitempty"`
}

// call runs one session for an MCP tool call: it submits the task through the gateway, reports
// each trace event as progress when the client asked for progress, and answers with the final
// text and outcome. A call that ends before its session (the client cancelled the request, or
// disconnected, or the wait ran out) cancels the session.
func (s *Server) call(ctx context.Context, decl toolhost.AgentDeclaration, agent string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s.calls.Add(1)
	defer s.calls.Done()
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return toolError(fmt.Sprintf("busy: %d calls are running, the most this server takes at once (--max-calls); try again", cap(s.slots))), nil
	}
	args := req.Params.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	task, err := decl.Task(args)
	if err != nil {
		return toolError(err.Error()), nil
	}
	sub := protocol.SubmitRequest{SessionID: gateway.NewSessionID(), Agent: agent, Task: task, Caller: Caller}
	var rep protocol.SubmitReply
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	err = bus.Request(sctx, s.conn.NC, s.names.Submit(), &sub, &rep, 5*time.Second)
	scancel()
	switch {
	case err != nil:
		return nil, fmt.Errorf("could not hand the task to the %s agent (the mesh did not answer; try again): %w", agent, err)
	case rep.Error != "":
		return toolError(fmt.Sprintf("the %s agent refused the task (%s): %s", agent, rep.Code, rep.Error)), nil
	}
	session := rep.SessionID

	wctx, wcancel := context.WithTimeout(ctx, s.opts.Wait)
	defer wcancel()
	token := req.Params.GetProgressToken()
	progress := func(n int, msg string) {
		if token != nil {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
				Progress: float64(n), Message: clip(msg, maxProgressMessage)})
		}
	}
	// The first notification names the session, for `skein trace` and `skein cancel`.
	progress(0, "session "+session+" submitted")
	var ans Answer
	ans.SessionID = session
	events, ended := 0, false
	err = trace.Follow(wctx, s.conn.JS, s.names, session, func(ev protocol.Event) bool {
		events++
		progress(events, trace.Line(ev))
		switch {
		case ev.Type.Terminal():
			ans.Outcome, ans.FinalText, ans.Reason = ev.Outcome, ev.Text, ev.Reason
		case ev.Type == protocol.EvUsage && ev.Role != protocol.RoleMiner:
			if ans.Outcome == "" {
				ans.Outcome = ev.Outcome
			}
			ended = true
			return false
		}
		return true
	})
	if !ended {
		why := "the MCP request was cancelled"
		if ctx.Err() == nil && wctx.Err() != nil {
			why = fmt.Sprintf("the MCP call waited %s, its limit", s.opts.Wait)
		} else if ctx.Err() == nil {
			why = fmt.Sprintf("following the session failed: %v", err)
		}
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer ccancel()
		if cerr := s.opts.Cancel(cctx, session, why); cerr != nil {
			s.opts.Logger.Warn("could not cancel the session of an MCP call that ended first; cancel it with `skein cancel`", "session", session, "err", cerr)
		}
		return nil, fmt.Errorf("session %s cancelled: %s", session, why)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: ans.FinalText}}, StructuredContent: ans}
	if !ans.Outcome.Succeeded() {
		res.IsError = true
		msg := fmt.Sprintf("the %s agent ended with %s", agent, ans.Outcome)
		if ans.Reason != "" {
			msg += ": " + ans.Reason
		}
		if ans.FinalText != "" {
			msg += "\n" + ans.FinalText
		}
		res.Content = []mcp.Content{&mcp.TextContent{Text: msg}}
	}
	return res, nil
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
