package toolhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/tools/schema"
	"github.com/skein-mesh/skein/pkg/trace"
)

// DefaultAgentWait bounds how long an agent tool waits for its child session to end.
const DefaultAgentWait = 10 * time.Minute

// agentCaller marks sub-agent sessions in the gateway's session_started event.
const agentCaller = "agent-tool"

// agentInputSchema is the one argument an agent tool takes.
var agentInputSchema = json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","minLength":1}},"required":["task"],"additionalProperties":false}`)

// agentSpec is what a model is shown of another agent offered as a tool: its declared
// description and input schema when its registration has them, else a generic line and
// {"task": string}. TimeoutS carries the wait so an executor calling it waits as long as the
// child session may run.
func agentSpec(name string, wait time.Duration, reg *protocol.AgentSpec) protocol.ToolSpec {
	spec := protocol.ToolSpec{
		Name:        name,
		Agent:       name,
		Description: fmt.Sprintf("Delegate a task to the %s agent; it answers with its final text.", name),
		InputSchema: agentInputSchema,
		TimeoutS:    wait.Seconds(),
	}
	if reg != nil && reg.Description != "" {
		spec.Description = reg.Description
	}
	if reg != nil && len(reg.InputSchema) > 0 {
		spec.InputSchema = reg.InputSchema
	}
	return spec
}

// declaration is what the toolhost currently offers of one agent: the spec it published and the
// compiled schema its arguments are checked against (nil: {"task": string}).
type declaration struct {
	spec   protocol.ToolSpec
	schema *schema.Schema
	// share is the agent's memory.share_with_parent (nil: it keeps its findings to itself).
	share *protocol.ShareSpec
}

// declare builds the declaration of an agent from its registration (nil: not registered yet).
// A schema that does not compile (a registration written by hand) is logged and left out.
func declare(name string, wait time.Duration, reg *protocol.AgentSpec, log *slog.Logger) *declaration {
	d := &declaration{spec: agentSpec(name, wait, reg)}
	if reg != nil && reg.Share != nil {
		sh := *reg.Share
		d.share = &sh
	}
	if reg != nil && len(reg.InputSchema) > 0 {
		sch, err := schema.Compile(reg.InputSchema)
		if err != nil {
			log.Warn("agent registration has an input schema that does not compile; offering {task} instead", "agent", name, "err", err)
			d.spec.InputSchema = agentInputSchema
		} else {
			d.schema = sch
		}
	}
	return d
}

// agentResult is the Result of an agent tool call.
type agentResult struct {
	SessionID string           `json:"session_id"`
	Outcome   protocol.Outcome `json:"outcome"`
	FinalText string           `json:"final_text"`
	// Shared counts the findings written to the caller's memory (memory.share_with_parent).
	Shared int `json:"shared_with_parent,omitempty"`
}

// agentTool delegates a tool call to another agent through the gateway, as a child session of
// the calling one, and answers with the child's final text and usage.
type agentTool struct {
	name  string
	conn  *bus.Conn
	names protocol.Names
	wait  time.Duration
	log   *slog.Logger
	decl  atomic.Pointer[declaration]
}

// ChildSessionID is the session id an agent tool gives the child of one tool call. It depends only
// on the calling session and the call id, so a retried call resubmits (and then follows) the same
// child instead of starting a second one.
func ChildSessionID(parent, callID string) string {
	sum := sha256.Sum256([]byte(parent + "\x00" + callID))
	return "a-" + hex.EncodeToString(sum[:12])
}

// addAgentEndpoints publishes the spec of every agent in tools.agents, as each declares itself
// in its registration, and serves each as a tool. A watch on the registrations publishes the
// spec again when an agent's declaration changes (or first appears: executors and toolhosts
// start in any order).
func (x *Host) addAgentEndpoints(ctx context.Context, d Deps, agents []string, taken map[string]bool) error {
	if len(agents) == 0 {
		return nil
	}
	wait := d.AgentWait
	if wait <= 0 {
		wait = DefaultAgentWait
	}
	for _, name := range agents {
		if err := protocol.IDAgent.Check(name); err != nil {
			return err
		}
		if taken[name] {
			return fmt.Errorf("tools.agents names %q, which is also a subprocess tool; rename one of them", name)
		}
		taken[name] = true
	}
	kv, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketAgents)
	if err != nil {
		return fmt.Errorf("toolhost: agent registrations: %w", err)
	}
	// WatchFiltered writes the subjects over the keys it is given: hand it a copy.
	w, err := kv.WatchFiltered(ctx, slices.Clone(agents))
	if err != nil {
		return fmt.Errorf("toolhost: watch agent registrations: %w", err)
	}
	regs := map[string]*protocol.AgentSpec{}
	for e := range w.Updates() {
		if e == nil {
			break // the registrations that exist are in
		}
		if reg, ok := DecodeRegistration(e); ok {
			regs[e.Key()] = reg
		}
	}
	byName := map[string]*agentTool{}
	specs := make([]protocol.ToolSpec, 0, len(agents))
	for _, name := range agents {
		a := &agentTool{name: name, conn: d.Conn, names: d.Names, wait: wait, log: x.log}
		a.decl.Store(declare(name, wait, regs[name], x.log))
		byName[name] = a
		specs = append(specs, a.decl.Load().spec)
	}
	if err := tools.Publish(ctx, d.Conn.JS, d.Names, specs); err != nil {
		_ = w.Stop()
		return fmt.Errorf("toolhost: %w", err)
	}
	for _, name := range agents {
		a := byName[name]
		spec := a.decl.Load().spec
		err := x.svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) { x.h.serveAgent(a, r) }),
			micro.WithEndpointSubject(d.Names.Tool(name)),
			micro.WithEndpointQueueGroup(protocol.QueueToolhost),
			micro.WithEndpointMetadata(map[string]string{"description": spec.Description, "agent": name}))
		if err != nil {
			_ = w.Stop()
			return fmt.Errorf("toolhost: endpoint for agent tool %s: %w", name, err)
		}
		x.tools = append(x.tools, name)
	}
	x.stopWatch = func() { _ = w.Stop() }
	go x.followDeclarations(ctx, d, w, byName)
	return nil
}

// followDeclarations republishes an agent's tool spec when its registration declares something
// new. Heartbeats rewrite the registration every few seconds; they change nothing here.
func (x *Host) followDeclarations(ctx context.Context, d Deps, w jetstream.KeyWatcher, byName map[string]*agentTool) {
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		a := byName[e.Key()]
		reg, ok := DecodeRegistration(e)
		if a == nil || !ok {
			continue
		}
		next := declare(a.name, a.wait, reg, x.log)
		prev := a.decl.Load()
		same := prev.spec.Description == next.spec.Description && bytes.Equal(prev.spec.InputSchema, next.spec.InputSchema)
		a.decl.Store(next)
		if same {
			continue
		}
		if err := tools.Publish(ctx, d.Conn.JS, d.Names, []protocol.ToolSpec{next.spec}); err != nil && ctx.Err() == nil {
			x.log.Warn("could not publish an agent's new declaration; callers see the old one", "agent", a.name, "err", err)
		}
	}
}

// AgentDeclaration is how an agent is offered as a tool, to models here and to MCP clients by
// `skein mcp serve`: its spec (declared description and input schema, else {"task": string}) and
// the task its arguments make.
type AgentDeclaration struct {
	name string
	d    *declaration
}

// DeclareAgent makes an agent's declaration from its registration (nil: not registered yet).
func DeclareAgent(name string, wait time.Duration, reg *protocol.AgentSpec, log *slog.Logger) AgentDeclaration {
	return AgentDeclaration{name: name, d: declare(name, wait, reg, log)}
}

// Spec is the agent's tool spec.
func (a AgentDeclaration) Spec() protocol.ToolSpec { return a.d.spec }

// Task checks args against the declared schema and returns the task a session is given: the
// "task" argument when that is all there is, else the arguments as JSON.
func (a AgentDeclaration) Task(args json.RawMessage) (string, error) { return a.d.task(a.name, args) }

// DecodeRegistration reads an agent's registration from its entry in the agents bucket (ok
// false: a deletion, or a value that does not decode).
func DecodeRegistration(e jetstream.KeyValueEntry) (*protocol.AgentSpec, bool) {
	if e.Operation() != jetstream.KeyValuePut {
		return nil, false
	}
	var reg protocol.AgentSpec
	if err := protocol.Unmarshal(e.Value(), &reg); err != nil {
		return nil, false
	}
	return &reg, true
}

// serveAgent runs one agent tool call on its own goroutine. It takes no subprocess slot: the
// call only waits on the mesh, and bounding it here could deadlock a chain of agents.
func (h *handler) serveAgent(a *agentTool, r micro.Request) {
	start := time.Now()
	reply := r.Reply()
	data := r.Data()
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		h.respond(reply, a.name, &protocol.ToolReply{Host: h.host, ToolResult: protocol.ToolResult{
			Kind: protocol.ToolErrUnavailable, Error: fmt.Sprintf("toolhost %s is shutting down; call %s again", h.host, a.name)}})
		return
	}
	h.inflight.Add(1)
	h.mu.Unlock()
	stopProgress := h.progress(r)
	go func() {
		defer h.inflight.Done()
		out := a.call(h, data)
		out.Host, out.LatencyMS = h.host, time.Since(start).Milliseconds()
		stopProgress()
		h.respond(reply, a.name, &out)
	}()
}

func toolFailure(kind, format string, args ...any) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: kind, Error: fmt.Sprintf(format, args...)}}
}

// call submits the child session and follows it to its end.
func (a *agentTool) call(h *handler, data []byte) protocol.ToolReply {
	var req protocol.ToolRequest
	if err := protocol.UnmarshalChecked(data, &req); err != nil {
		out := toolFailure(protocol.ToolErrBadArgs, "malformed tool request for %s: %v", a.name, err)
		out.Code = protocol.CodeOf(err) // bad_request, or too_large for an id over its length
		return out
	}
	// The calling session's cancel ends the wait; the gateway cancels the child down the lineage.
	ctx, release, refusal := h.admit(req)
	if refusal != nil {
		return protocol.ToolReply{ToolResult: *refusal}
	}
	defer release()
	if req.Tool != "" && req.Tool != a.name {
		return toolFailure(protocol.ToolErrUnknown, "request for tool %q arrived on the endpoint of %q", req.Tool, a.name)
	}
	task, err := a.task(req.Args)
	if err != nil {
		return toolFailure(protocol.ToolErrBadArgs, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()

	sub := protocol.SubmitRequest{Agent: a.name, Task: task, Parent: req.SessionID, Depth: req.Depth + 1, Caller: agentCaller}
	if req.SessionID != "" && req.CallID != "" {
		sub.SessionID = ChildSessionID(req.SessionID, req.CallID)
	}
	var sr protocol.SubmitReply
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	err = bus.Request(sctx, a.conn.NC, a.names.Submit(), &sub, &sr, 5*time.Second)
	scancel()
	switch {
	case err != nil:
		return toolFailure(protocol.ToolErrUnavailable, "could not hand the task to the %s agent: %v", a.name, err)
	case sr.Err() != nil:
		return toolFailure(protocol.ToolErrToolError, "the %s agent refused the task: %v", a.name, sr.Err())
	}
	child := sr.SessionID
	a.log.Debug("agent tool started a child session", "agent", a.name, "parent", req.SessionID, "call", req.CallID,
		"child", child, "duplicate", sr.Duplicate)

	end, err := followChild(ctx, a.conn.JS, a.names, child)
	if err != nil {
		if ce, ok := govern.AsCancelled(ctx); ok {
			return toolFailure(protocol.ToolErrUnavailable, "stopped: %v (child session %s is cancelled with it)", ce, child)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return toolFailure(protocol.ToolErrTimeout, "the %s agent did not finish within %s; its session %s may still be running", a.name, a.wait, child)
		}
		return toolFailure(protocol.ToolErrUnavailable, "following the %s agent's session %s: %v", a.name, child, err)
	}
	shared := 0
	if sh := a.decl.Load().share; sh != nil && end.outcome.Succeeded() && req.Agent != "" {
		shared = a.share(ctx, *sh, req.Agent, child, end)
	}
	res, err := json.Marshal(agentResult{SessionID: child, Outcome: end.outcome, FinalText: end.text, Shared: shared})
	if err != nil {
		return toolFailure(protocol.ToolErrMalformed, "encode the %s agent's answer: %v", a.name, err)
	}
	out := protocol.ToolReply{ToolResult: protocol.ToolResult{OK: end.outcome.Succeeded(), Result: res}, Usage: end.usage}
	if !out.OK {
		out.Kind = protocol.ToolErrToolError
		out.Error = fmt.Sprintf("the %s agent ended with %s", a.name, end.outcome)
		if end.reason != "" {
			out.Error += ": " + end.reason
		}
	}
	return out
}

// task checks the arguments against the agent's declared schema and returns the child's task:
// the "task" argument when that is all there is, else the arguments as JSON.
func (a *agentTool) task(args json.RawMessage) (string, error) {
	return a.decl.Load().task(a.name, args)
}

func (decl *declaration) task(name string, args json.RawMessage) (string, error) {
	if decl.schema == nil {
		task, err := agentTask(args)
		if err != nil {
			return "", fmt.Errorf("arguments of %s: %v; send {\"task\": \"what the %s agent should do\"}", name, err, name)
		}
		return task, nil
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if err := decl.schema.Validate(args); err != nil {
		return "", fmt.Errorf("arguments of %s: %v", name, err)
	}
	if task, err := agentTask(args); err == nil {
		return task, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err != nil {
		return "", fmt.Errorf("arguments of %s are not JSON: %v", name, err)
	}
	return buf.String(), nil
}

// agentTask checks the arguments against agentInputSchema and returns the task.
func agentTask(args json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	var in struct {
		Task *string `json:"task"`
	}
	if err := dec.Decode(&in); err != nil {
		return "", fmt.Errorf("not a JSON object with only a \"task\" string: %w", err)
	}
	if in.Task == nil || *in.Task == "" {
		return "", errors.New("\"task\" is required and must not be empty")
	}
	return *in.Task, nil
}

type childEnd struct {
	outcome protocol.Outcome
	text    string
	reason  string
	usage   *protocol.UsageReport
	// notes are what the child stored with remember, in order (at most MaxRememberNotes).
	notes []string
}

// followChild reads the child's trace until its planner's usage event, which follows the event
// that ended the session. A later usage event from the miner is not waited for.
func followChild(ctx context.Context, js jetstream.JetStream, names protocol.Names, session string) (childEnd, error) {
	var end childEnd
	done := false
	err := trace.Follow(ctx, js, names, session, func(ev protocol.Event) bool {
		switch {
		case ev.Type.Terminal():
			end.outcome, end.text, end.reason = ev.Outcome, ev.Text, ev.Reason
		case ev.Type == protocol.EvToolCall && ev.Tool == protocol.ToolRemember && ev.Result != nil && ev.Result.OK &&
			len(end.notes) < protocol.MaxRememberNotes:
			var args struct {
				Note string `json:"note"`
			}
			if json.Unmarshal(ev.Args, &args) == nil && strings.TrimSpace(args.Note) != "" {
				end.notes = append(end.notes, strings.TrimSpace(args.Note))
			}
		case ev.Type == protocol.EvUsage && ev.Role != protocol.RoleMiner:
			if ev.Outcome != "" {
				end.outcome = ev.Outcome
			}
			end.usage = ev.Report
			done = true
			return false
		}
		return true
	})
	if err == nil && !done {
		err = fmt.Errorf("trace of session %s ended before its usage event", session)
	}
	if err != nil {
		return childEnd{}, err
	}
	if end.outcome == "" {
		end.outcome = protocol.OutcomeFailed
	}
	return end, nil
}

// share writes what a child found (its final answer, then its remember notes, at most
// MaxFindings of at most MaxChars each) into the calling agent's memory, tagged with the child
// agent and session. Each finding's key is fixed by the child session and the text, so a
// repeated call (a redelivered step, a retried request) writes nothing twice. It returns how
// many findings memoryd took; a failure is logged and costs the caller nothing else.
func (a *agentTool) share(ctx context.Context, sh protocol.ShareSpec, parent, child string, end childEnd) int {
	var notes []protocol.RememberNote
	add := func(key, text string) {
		if text = strings.TrimSpace(text); text != "" && len(notes) < sh.MaxFindings {
			notes = append(notes, protocol.RememberNote{Key: key, Text: clip(text, sh.MaxChars)})
		}
	}
	add("finding:answer", end.text)
	for _, n := range end.notes {
		sum := sha256.Sum256([]byte(n))
		add("finding:note:"+hex.EncodeToString(sum[:8]), n)
	}
	if len(notes) == 0 {
		return 0
	}
	req := protocol.RememberRequest{Agent: parent, SessionID: child, Source: protocol.SourceSubagent, SourceAgent: a.name, Notes: notes}
	var rep protocol.RememberReply
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := bus.Request(rctx, a.conn.NC, a.names.Memory(protocol.MemRemember), &req, &rep, 10*time.Second)
	if err == nil && len(rep.Actions) == 0 {
		err = rep.Err() // refused as a whole (a stale store, a bad request); else per note below
	}
	if err != nil {
		a.log.Warn("could not share a sub-agent's findings with its parent's memory", "agent", a.name, "parent", parent, "child", child,
			"code", protocol.CodeOf(err), "err", err)
		return 0
	}
	n := 0
	for _, act := range rep.Actions {
		switch act.Action {
		case "refused", "error":
			a.log.Warn("a sub-agent finding was not stored", "agent", a.name, "parent", parent, "child", child, "key", act.Key, "detail", act.Detail)
		default:
			n++
		}
	}
	return n
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
