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
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/trace"
)

// DefaultAgentWait bounds how long an agent tool waits for its child session to end.
const DefaultAgentWait = 10 * time.Minute

// agentCaller marks sub-agent sessions in the gateway's session_started event.
const agentCaller = "agent-tool"

// agentInputSchema is the one argument an agent tool takes.
var agentInputSchema = json.RawMessage(`{"type":"object","properties":{"task":{"type":"string","minLength":1}},"required":["task"],"additionalProperties":false}`)

// agentSpec is what a model is shown of another agent offered as a tool. TimeoutS carries the
// wait so an executor calling it waits as long as the child session may run.
func agentSpec(name string, wait time.Duration) protocol.ToolSpec {
	return protocol.ToolSpec{
		Name:        name,
		Agent:       name,
		Description: fmt.Sprintf("Delegate a task to the %s agent; it answers with its final text.", name),
		InputSchema: agentInputSchema,
		TimeoutS:    wait.Seconds(),
	}
}

// agentResult is the Result of an agent tool call.
type agentResult struct {
	SessionID string           `json:"session_id"`
	Outcome   protocol.Outcome `json:"outcome"`
	FinalText string           `json:"final_text"`
}

// agentTool delegates a tool call to another agent through the gateway, as a child session of
// the calling one, and answers with the child's final text and usage.
type agentTool struct {
	name  string
	conn  *bus.Conn
	names protocol.Names
	wait  time.Duration
	log   *slog.Logger
}

// ChildSessionID is the session id an agent tool gives the child of one tool call. It depends only
// on the calling session and the call id, so a retried call resubmits (and then follows) the same
// child instead of starting a second one.
func ChildSessionID(parent, callID string) string {
	sum := sha256.Sum256([]byte(parent + "\x00" + callID))
	return "a-" + hex.EncodeToString(sum[:12])
}

// addAgentEndpoints publishes the spec of every agent in tools.agents and serves each as a tool.
func (x *Host) addAgentEndpoints(ctx context.Context, d Deps, agents []string, taken map[string]bool) error {
	wait := d.AgentWait
	if wait <= 0 {
		wait = DefaultAgentWait
	}
	specs := make([]protocol.ToolSpec, 0, len(agents))
	for _, name := range agents {
		if err := protocol.CheckToken("agent name (tools.agents)", name); err != nil {
			return err
		}
		if taken[name] {
			return fmt.Errorf("tools.agents names %q, which is also a subprocess tool; rename one of them", name)
		}
		taken[name] = true
		specs = append(specs, agentSpec(name, wait))
	}
	if err := tools.Publish(ctx, d.Conn.JS, d.Names, specs); err != nil {
		return fmt.Errorf("toolhost: %w", err)
	}
	for _, spec := range specs {
		a := &agentTool{name: spec.Name, conn: d.Conn, names: d.Names, wait: wait, log: x.log}
		err := x.svc.AddEndpoint(spec.Name, micro.HandlerFunc(func(r micro.Request) { x.h.serveAgent(a, r) }),
			micro.WithEndpointSubject(d.Names.Tool(spec.Name)),
			micro.WithEndpointQueueGroup(protocol.QueueToolhost),
			micro.WithEndpointMetadata(map[string]string{"description": spec.Description, "agent": spec.Agent}))
		if err != nil {
			return fmt.Errorf("toolhost: endpoint for agent tool %s: %w", spec.Name, err)
		}
		x.tools = append(x.tools, spec.Name)
	}
	return nil
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
	go func() {
		defer h.inflight.Done()
		out := a.call(h, data)
		out.Host, out.LatencyMS = h.host, time.Since(start).Milliseconds()
		h.respond(reply, a.name, &out)
	}()
}

func toolFailure(kind, format string, args ...any) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: kind, Error: fmt.Sprintf(format, args...)}}
}

// call submits the child session and follows it to its end.
func (a *agentTool) call(h *handler, data []byte) protocol.ToolReply {
	var req protocol.ToolRequest
	if err := protocol.Unmarshal(data, &req); err != nil {
		return toolFailure(protocol.ToolErrBadArgs, "malformed tool request for %s: %v", a.name, err)
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
	task, err := agentTask(req.Args)
	if err != nil {
		return toolFailure(protocol.ToolErrBadArgs, "arguments of %s: %v; send {\"task\": \"what the %s agent should do\"}", a.name, err, a.name)
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
	case sr.Error != "":
		return toolFailure(protocol.ToolErrToolError, "the %s agent refused the task: %s", a.name, sr.Error)
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
	res, err := json.Marshal(agentResult{SessionID: child, Outcome: end.outcome, FinalText: end.text})
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
