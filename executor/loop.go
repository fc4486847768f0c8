package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/skein-mesh/skein/pkg/memory/profile"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

// maxBadArgTurns is how many model turns in a row may carry only malformed tool arguments before
// the step fails: the model sees each error and may correct itself, but not forever.
const maxBadArgTurns = 2

// run is the state of one step's loop.
type run struct {
	e      *Executor
	step   protocol.Step
	tools  map[string]protocol.ToolSpec
	defs   []llm.ToolDef
	system []llm.SystemBlock
	msgs   []llm.Message
	sizes  []int // token count of each of msgs, -1 until counted (see transcriptTokens)
	// own is the token count of this step's own message (its task, or a conversation's new
	// message, with the tactical guidelines): compaction never cuts it (see overWindow).
	own      int
	usage    protocol.Usage
	toolFail bool
	badTurns int
	// askedFinish: the model answered in plain text after a tool failure and was asked to report
	// through finish (once per step).
	askedFinish bool
	ts          *toolset    // offered and known tools (toolset.go)
	rs          resultState // stored large results (results.go)
	gov         *guard
	ctx         context.Context
}

// RunStep runs the ReAct loop for one step and returns its result. It never panics on bad model
// output: every protocol problem becomes the failed outcome with a reason.
func (e *Executor) RunStep(ctx context.Context, step protocol.Step) protocol.StepResult {
	res := protocol.StepResult{SessionID: step.SessionID, StepID: step.StepID}
	r := &run{e: e, step: step}
	ctx, r.gov = e.governStep(ctx, step)
	defer r.gov.release()
	r.ctx = ctx
	if out, reason, stop := r.gov.halt(ctx); stop {
		return r.finish(res, 0, out, "", reason) // never started: a cancelled or spent session
	}
	started := protocol.Event{Type: protocol.EvStepStarted, Role: protocol.RoleExecutor, Text: step.Instruction,
		Attrs: map[string]string{"executor": e.d.ID}}
	if ns := e.d.Config.MemoryAgent(); ns != step.Agent {
		// The miner learns into the memory the step used.
		started.Attrs[protocol.AttrMemory] = ns
	}
	e.emit(step, started)
	if err := r.prepare(ctx); err != nil {
		return r.finish(res, 0, protocol.OutcomeFailed, "", err.Error())
	}
	maxTurns := e.d.Config.Agent.MaxTurns
	for turn := 1; turn <= maxTurns; turn++ {
		if out, reason, stop := r.gov.halt(ctx); stop {
			return r.finish(res, turn-1, out, "", reason)
		}
		r.compact(ctx, turn)
		if reason := r.overWindow(); reason != "" {
			return r.finish(res, turn-1, protocol.OutcomeFailed, "", reason)
		}
		resp, err := r.call(ctx, turn)
		if err != nil {
			if out, reason, stop := r.gov.halt(ctx); stop {
				return r.finish(res, turn, out, "", reason)
			}
			return r.finish(res, turn, protocol.OutcomeFailed, "", "model call failed: "+err.Error())
		}
		if len(resp.ToolCalls) == 0 {
			text := strings.TrimSpace(resp.Text)
			if text == "" {
				return r.finish(res, turn, protocol.OutcomeFailed, "", fmt.Sprintf("model returned an empty answer (stop reason %s)", resp.StopReason))
			}
			if !r.toolFail {
				return r.finish(res, turn, protocol.OutcomeSuccess, text, "")
			}
			// After a tool failure a plain-text answer may well be a give-up ("could not deploy"):
			// only the model can say, so it is asked once to report through finish.
			if !r.askedFinish && turn < maxTurns {
				r.askFinish(turn)
				continue
			}
			return r.finish(res, turn, protocol.OutcomeNotAccomplished, text, unreportedReason)
		}
		if fc, ok := finishCall(resp.ToolCalls); ok {
			if rep, err := parseFinish(fc.Args); err == nil {
				return r.reported(res, turn, rep, len(resp.ToolCalls)-1)
			}
		}
		if strings.TrimSpace(resp.Text) != "" {
			e.emit(step, protocol.Event{Type: protocol.EvThought, Role: protocol.RoleExecutor, Turn: turn, Text: resp.Text})
		}
		allBad := r.runTools(ctx, turn, resp)
		if allBad {
			r.badTurns++
			if r.badTurns >= maxBadArgTurns {
				return r.finish(res, turn, protocol.OutcomeFailed, "", fmt.Sprintf("model sent malformed tool arguments %d turns in a row", r.badTurns))
			}
		} else {
			r.badTurns = 0
		}
	}
	outcome := protocol.OutcomeIncomplete
	if r.toolFail {
		outcome = protocol.OutcomeIncompleteToolFail
	}
	return r.finish(res, maxTurns, outcome, "", fmt.Sprintf("turn limit of %d model turns per step (agent.max_turns) reached without an answer", maxTurns))
}

func (r *run) finish(res protocol.StepResult, turns int, outcome protocol.Outcome, text, reason string) protocol.StepResult {
	res.Outcome, res.FinalText, res.Reason, res.Turns, res.Usage = outcome, text, reason, turns, r.usage
	r.traceUsed(turns)
	r.saveTranscript()
	r.e.emit(r.step, protocol.Event{Type: protocol.EvStepFinished, Role: protocol.RoleExecutor, Turn: turns,
		Outcome: outcome, Reason: reason, Text: text})
	return res
}

// prepare fixes the session's tool set and builds the prompt. The tool list and the system
// blocks do not change during the step, so the provider can cache them.
func (r *run) prepare(ctx context.Context) error {
	cfg := r.e.d.Config
	specs, err := r.e.catalog(ctx)
	if err != nil {
		return err
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	mem := r.e.retrieve(ctx, r.step, names)
	r.offerTools(ctx, specs, mem.Guidelines)
	r.system, r.msgs = buildPrompt(cfg, r.e.profile(), r.step, mem.Guidelines, retrieve.RenderExamples(mem.Cases, mem.Skills), r.e.cacheOn())
	r.own = messageTokens(r.msgs[0])
	return r.continueConversation(ctx)
}

// profile is the agent's standing profile as learning left it (the file with its applied patches),
// read for every step so that an applied or reverted patch counts from the next step on. A profile
// that became unreadable is left out of the step, with a warning naming why.
func (e *Executor) profile() string {
	p := e.d.Config.Agent.Profile
	if p == "" {
		return ""
	}
	text, l, err := profile.Load(p)
	if err != nil {
		e.d.Logger.Warn("step runs without the agent's profile: it cannot be read; fix the file or agent.profile", "err", err)
		return ""
	}
	return profile.Render(text, l)
}

func (e *Executor) cacheOn() bool { return e.d.Config.ForRole(protocol.RoleExecutor).Cache != "off" }

// retrieve asks memoryd for guidelines, and for the worked examples and the procedure the config
// asks for; without memoryd the step still runs, and the trace says so.
func (e *Executor) retrieve(ctx context.Context, step protocol.Step, toolNames []string) protocol.RetrieveReply {
	m := e.d.Config.Memory
	if !m.Enabled {
		return protocol.RetrieveReply{}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var rep protocol.RetrieveReply
	req := protocol.RetrieveRequest{Agent: e.d.Config.MemoryAgent(), Task: step.Task + "\n" + step.Instruction, Tools: toolNames,
		TopK: m.TopK, SessionID: step.SessionID, ExampleBudget: m.Cases.ExampleBudget}
	if m.Cases.Enabled {
		req.Cases = m.Cases.Examples
	}
	if m.Skills.Enabled && m.Skills.Show {
		req.Skills = 1
	}
	if err := bus.Request(rctx, e.d.Conn.NC, e.d.Names.Memory(protocol.MemRetrieve), &req, &rep, 2*time.Second); err != nil {
		e.emit(step, protocol.Event{Type: protocol.EvDecision, Role: protocol.RoleExecutor, Text: "running without guidelines: " + err.Error()})
		return protocol.RetrieveReply{}
	}
	if err := rep.Err(); err != nil {
		e.emit(step, protocol.Event{Type: protocol.EvDecision, Role: protocol.RoleExecutor, Text: "running without guidelines: " + err.Error()})
		return protocol.RetrieveReply{}
	}
	e.emit(step, protocol.Event{Type: protocol.EvRetrieval, Role: protocol.RoleExecutor, Guidelines: rep.Guidelines,
		Recalled: append(slices.Clone(rep.Skills), rep.Cases...)})
	return rep
}

func (r *run) call(ctx context.Context, turn int) (*llm.Response, error) {
	cfg := r.e.d.Config.ForRole(protocol.RoleExecutor)
	msgs := make([]llm.Message, len(r.msgs))
	copy(msgs, r.msgs)
	if r.e.cacheOn() && len(msgs) > 0 {
		// A breakpoint on the newest message lets the next turn read this whole prefix from cache.
		msgs[len(msgs)-1].Cache = true
	}
	req := llm.Request{Model: cfg.Model, System: r.system, Tools: r.defs, Messages: msgs, MaxTokens: r.e.maxTokens(cfg.MaxTokens),
		CacheTools: r.e.cacheOn() && len(r.defs) > 0, CacheTTL: cfg.CacheTTL, Role: protocol.RoleExecutor}
	start := time.Now()
	deltas := r.streamTo(&req, turn)
	resp, err := r.e.model.Complete(ctx, req)
	if deltas != nil {
		// Readers get the end of the text before the trace says the turn is over.
		if err := deltas.Close(); err != nil {
			r.e.d.Logger.Warn("streaming a model turn: readers saw part of it (the trace has it whole)", "err", err)
		}
	}
	ev := protocol.Event{Type: protocol.EvModelCall, Role: protocol.RoleExecutor, Turn: turn, Model: cfg.Model,
		Provider: r.e.model.Provider(), LatencyMS: time.Since(start).Milliseconds(), Attrs: map[string]string{"cache_ttl": cfg.CacheTTL}}
	if err != nil {
		ev.Reason = err.Error()
		r.e.emit(r.step, ev)
		return nil, err
	}
	r.usage = r.usage.Add(resp.Usage)
	r.gov.chargeModel(ctx, cmp.Or(resp.Model, cfg.Model), cfg.CacheTTL, resp.Usage)
	u := resp.Usage
	ev.Usage, ev.StopReason = &u, resp.StopReason
	if resp.Model != "" {
		ev.Model = resp.Model
	}
	r.e.emit(r.step, ev)
	// Record the assistant turn exactly as the model gave it, so tool results pair with calls.
	var blocks []llm.Block
	if resp.Text != "" {
		blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: resp.Text})
	}
	for i := range resp.ToolCalls {
		tc := resp.ToolCalls[i]
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d_%d", turn, i)
			resp.ToolCalls[i].ID = tc.ID
		}
		blocks = append(blocks, llm.Block{Type: llm.BlockToolUse, ToolUse: &tc})
	}
	if len(blocks) > 0 {
		r.msgs = append(r.msgs, llm.Message{Role: llm.RoleAssistant, Content: blocks})
	}
	return resp, nil
}

// streamTo has the model's text published while it is generated (executor.stream), for this
// turn of the step; nil when streaming is off.
func (r *run) streamTo(req *llm.Request, turn int) *delta.Turn {
	st := r.e.d.Config.Executor.Stream
	if !st.Enabled {
		return nil
	}
	t := delta.Start(r.e.d.Conn.NC, r.e.d.Names, r.step.SessionID, r.step.StepID, turn,
		delta.Options{Flush: time.Duration(st.FlushMS) * time.Millisecond, MaxBytes: st.MaxBytes})
	req.Stream = func(d llm.Delta) {
		if d.Restart {
			t.Restart()
		} else {
			t.Text(d.Text)
		}
	}
	return t
}

// runTools runs one turn's calls concurrently, bounded by tools.max_parallel, and appends their
// results in the model's order. It reports whether every call had malformed arguments.
func (r *run) runTools(ctx context.Context, turn int, resp *llm.Response) bool {
	calls := resp.ToolCalls
	results := make([]protocol.ToolReply, len(calls))
	var jobs []func()
	bad := 0
	for i, c := range calls {
		if !c.ValidArgs() {
			bad++
			results[i] = protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrBadArgs,
				Error: fmt.Sprintf("the arguments of %s are not a valid JSON object: %s; send a JSON object that matches its input schema", c.Name, clipString(string(c.Args), 200))}}
			continue
		}
		if c.Name == finishTool {
			_, err := parseFinish(c.Args)
			results[i] = finishFailure(err)
			continue
		}
		if reply, done := r.beforeCall(ctx, c); done {
			results[i] = reply
			continue
		}
		if ex := r.gov.beforeTool(ctx, r.tools[c.Name], r.step.Depth+1); ex != nil {
			results[i] = refused(ex)
			continue
		}
		jobs = append(jobs, func() {
			// The call id depends on where the call sits, not on the model's id, so a redelivered
			// step asks the toolhost for the same ids and gets recorded results back.
			wait := r.toolTimeout(r.tools[c.Name])
			req := protocol.ToolRequest{SessionID: r.step.SessionID, StepID: r.step.StepID, CallID: protocol.ToolCallID(r.step.SessionID, r.step.StepID, turn, i),
				Tool: c.Name, Args: c.Args, Depth: r.step.Depth, Agent: r.e.d.Config.MemoryAgent(), DeadlineMS: r.gov.toolDeadline(wait).UnixMilli()}
			var reply protocol.ToolReply
			var err error
			call := func() { reply, err = tools.Call(ctx, r.e.d.Conn.NC, r.e.d.Names, req, wait) }
			if r.tools[c.Name].Agent != "" {
				// The child session may need a step of this very executor (an agent that calls
				// itself, or concurrency 1): the step waits without holding its place.
				worker.Waiting(ctx, call)
			} else {
				call()
			}
			if err != nil {
				reply = protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrUnavailable, Error: err.Error()}}
			}
			results[i] = interrupted(ctx, reply)
		})
	}
	if len(jobs) == 1 {
		jobs[0]() // the usual turn: one call, on this goroutine
	} else {
		sem := make(chan struct{}, max(r.e.d.Config.Tools.MaxParallel, 1))
		var wg sync.WaitGroup
		for _, job := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				job()
			}()
		}
		wg.Wait()
	}
	for i, c := range calls {
		r.subagentUsage(turn, c.Name, results[i])
	}
	format := r.e.d.Config.Tools.ResultFormat
	blocks := make([]llm.Block, len(calls))
	r.rs.raw = nil
	for i, c := range calls {
		res := results[i]
		if !res.OK {
			r.toolFail = true
		}
		content, tr := r.render(ctx, c, res.ToolResult, format)
		ev := protocol.Event{Type: protocol.EvToolCall, Role: protocol.RoleExecutor, Turn: turn, Tool: c.Name,
			CallID: protocol.ToolCallID(r.step.SessionID, r.step.StepID, turn, i), Args: safeArgs(c.Args), Result: &tr, LatencyMS: res.LatencyMS}
		if res.Replayed {
			ev.Attrs = map[string]string{"replayed": "true"}
		}
		r.e.emit(r.step, ev)
		blocks[i] = llm.Block{Type: llm.BlockToolResult, ToolResult: &llm.ToolResult{CallID: c.ID, Content: content, IsError: !tr.OK}}
	}
	r.msgs = append(r.msgs, llm.Message{Role: llm.RoleUser, Content: append(blocks, r.widen(turn)...)})
	return bad == len(calls)
}

// subagentUsage records the tokens of an agent called as a tool as model calls of this session
// with role subagent, so the session's usage report counts them.
func (r *run) subagentUsage(turn int, tool string, reply protocol.ToolReply) {
	if reply.Usage == nil {
		return
	}
	var child struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal(reply.Result, &child)
	models := make([]string, 0, len(reply.Usage.ByModel))
	for m := range reply.Usage.ByModel {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		u := reply.Usage.ByModel[m]
		r.e.emit(r.step, protocol.Event{Type: protocol.EvModelCall, Role: protocol.RoleSubagent, Turn: turn, Model: m,
			Tool: tool, Usage: &u, Attrs: map[string]string{"child_session": child.SessionID}})
	}
}

// toolTimeout waits for the tool's own limit plus room for the host to report a timeout itself.
func (r *run) toolTimeout(spec protocol.ToolSpec) time.Duration {
	limit := max(spec.TimeoutS, r.e.d.Config.Tools.TimeoutS)
	return time.Duration(limit*float64(time.Second)) + 10*time.Second
}

// catalog reads the session's tool set. Enabled tools a toolhost has not published yet get a
// short grace period, since toolhosts and executors start in any order; after it the step runs
// with what exists and the trace says what is missing. A read that fails is asked again within
// the same period (on a cluster the bucket's stream may be electing a leader after a node died),
// unless the server refused it.
func (e *Executor) catalog(ctx context.Context) ([]protocol.ToolSpec, error) {
	var specs []protocol.ToolSpec
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(10*time.Second)), ctx)
	err := backoff.Retry(func() error {
		var err error
		specs, err = tools.Catalog(ctx, e.d.Conn.JS, e.d.Names, e.d.catalogNames())
		specs = e.d.offered(specs)
		var missing *tools.MissingToolsError
		if err != nil && !errors.As(err, &missing) {
			err = fmt.Errorf("tool catalog: %w", err)
			if errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) {
				return backoff.Permanent(err)
			}
		}
		return err
	}, b)
	var missing *tools.MissingToolsError
	if errors.As(err, &missing) {
		e.d.Logger.Warn("running without some enabled tools", "err", err)
		return specs, nil
	}
	return specs, err
}

// catalogNames is the allow-list to read from the catalog: the enabled tools and the agents
// offered as tools (nil, every published tool, when no tool allow-list is set, or when the agent
// mounts MCP servers, whose tools' names are known only once the servers list them).
func (d Deps) catalogNames() []string {
	t := d.Config.Tools
	if len(t.Enabled) == 0 || len(t.MCP) > 0 {
		return nil
	}
	return append(append([]string(nil), t.Enabled...), t.Agents...)
}

// offered drops what another agent's toolhost published for its own agent (the tools KV is
// shared by the whole mesh): agents this agent's tools.agents does not list, and tools of MCP
// servers its tools.mcp does not mount; and, with an allow-list, the manifest tools it does not
// name (tools.enabled selects manifest tools; a server's allow and deny select its tools).
func (d Deps) offered(specs []protocol.ToolSpec) []protocol.ToolSpec {
	t := d.Config.Tools
	return slices.DeleteFunc(specs, func(s protocol.ToolSpec) bool {
		switch {
		case s.Agent != "":
			return !slices.Contains(t.Agents, s.Agent)
		case s.MCP != "":
			_, mounted := t.MCP[s.MCP]
			return !mounted
		}
		return len(t.Enabled) > 0 && !slices.Contains(t.Enabled, s.Name)
	})
}

// safeArgs keeps malformed arguments in the trace as a JSON string instead of breaking the event.
func safeArgs(a json.RawMessage) json.RawMessage {
	if json.Valid(a) {
		return a
	}
	b, _ := json.Marshal(string(a))
	return b
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (e *Executor) emit(step protocol.Step, ev protocol.Event) {
	ev.SessionID, ev.StepID, ev.Agent = step.SessionID, step.StepID, step.Agent
	if err := e.trace.Emit(ev); err != nil {
		e.d.Logger.Warn("trace", "session", step.SessionID, "type", ev.Type, "err", err)
	}
}
