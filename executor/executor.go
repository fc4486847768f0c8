// Package executor runs steps: it pulls work for one agent from WORK, runs the ReAct loop with a
// model and the agent's tools, traces every action and publishes the step's result to RESULTS.
// Executors of one agent share one durable consumer, so starting more processes scales the agent.
package executor

import (
	"context"
	"errors"
	"fmt"
	"github.com/skein-mesh/skein/pkg/memory/profile"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Deps are what an executor needs.
type Deps struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string
	// ID names this executor in results and traces (default: host and pid).
	ID string
	// Backend overrides the model built from the config (tests).
	Backend llm.Backend
	// Concurrency is how many steps this process runs at once (0: executor.concurrency, else
	// DefaultConcurrency).
	Concurrency int
	// Ready, when set, is closed once the executor pulls steps.
	Ready chan<- struct{}
}

// DefaultConcurrency is the steps one executor runs at once when nothing says otherwise: a step
// mostly waits on a model or a tool, so several per CPU keep the machine busy without
// overcommitting it; start more executor processes (or machines) to go further.
func DefaultConcurrency() int { return max(8, 8*runtime.NumCPU()) }

// Executor runs steps for one agent.
type Executor struct {
	d        Deps
	model    llm.Backend
	sessions *session.Records
	steps    jetstream.KeyValue
	agents   jetstream.KeyValue
	trace    *trace.Publisher
	trOnce   sync.Once
	tr       *toolRetrieval // the tool ranker (toolset.go), made on first use
	// watch stops the steps of cancelled sessions; ledger charges budgets mesh-wide.
	watch  *govern.Watcher
	ledger *govern.Ledger
	// window and maxOut are the model's context window and output limit (0: unknown).
	window, maxOut int
	// objects is the payloads object store (transcripts), opened on first use.
	objMu   sync.Mutex
	objects jetstream.ObjectStore
	// notes is the model compaction extracts a conversation's notes with (notes.go).
	notes notesModel
}

// Run serves until ctx ends.
func Run(ctx context.Context, d Deps) error {
	e, err := New(ctx, d)
	if err != nil {
		return err
	}
	return e.Serve(ctx)
}

// New builds the model backend, opens the buckets and registers the agent.
func New(ctx context.Context, d Deps) (*Executor, error) {
	if d.ID == "" {
		host, _ := os.Hostname()
		d.ID = fmt.Sprintf("executor@%s/%d", host, os.Getpid())
	}
	if d.Concurrency <= 0 {
		d.Concurrency = d.Config.Executor.Concurrency
	}
	if d.Concurrency <= 0 {
		d.Concurrency = DefaultConcurrency()
	}
	if p := d.Config.Agent.Profile; p != "" {
		if _, _, err := profile.Load(p); err != nil {
			return nil, fmt.Errorf("executor: agent.profile: %w (fix the path in agent.yaml or remove the key)", err)
		}
	}
	model := d.Backend
	if model == nil {
		var err error
		if model, err = llm.New(d.Config.ForRole(protocol.RoleExecutor), llm.WithLogger(d.Logger)); err != nil {
			return nil, fmt.Errorf("executor model: %w", err)
		}
	}
	sessions, err := session.Open(ctx, d.Conn.JS, d.Names)
	if err != nil {
		return nil, err
	}
	steps, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketSteps)
	if err != nil {
		return nil, err
	}
	e := &Executor{d: d, model: model, sessions: sessions, steps: steps, trace: trace.NewPublisher(d.Conn.JS, d.Names, d.ID)}
	e.resolveLimits()
	if e.ledger, err = govern.OpenLedger(ctx, d.Conn.JS, d.Names); err != nil {
		return nil, err
	}
	if e.watch, err = govern.Watch(d.Conn.NC, d.Names); err != nil {
		return nil, err
	}
	if err := e.register(ctx); err != nil {
		e.watch.Stop()
		return nil, err
	}
	return e, nil
}

// register publishes the agent's spec so the gateway accepts its tasks. The registration
// lapses after mesh.agent_ttl unless refreshed, so an agent whose executors are all gone is
// refused instead of queueing tasks forever.
func (e *Executor) register(ctx context.Context) error {
	kv, err := bus.KV(ctx, e.d.Conn.JS, e.d.Names, protocol.BucketAgents)
	if err != nil {
		return err
	}
	e.agents = kv
	c := e.d.Config
	if entry, err := kv.Get(ctx, c.Agent.Name); err == nil {
		var prev protocol.AgentSpec
		if protocol.Unmarshal(entry.Value(), &prev) == nil && !prev.Lapsed(time.Now()) && !slices.Equal(prev.Tools, c.Tools.Enabled) {
			e.d.Logger.Warn("another executor serves this agent with other tools; executors of one agent should share one config",
				"agent", c.Agent.Name, "other", prev.Executor, "other_tools", prev.Tools, "tools", c.Tools.Enabled)
		}
	}
	return e.heartbeat(ctx)
}

// heartbeat writes the agent's registration with a fresh expiry.
func (e *Executor) heartbeat(ctx context.Context) error {
	c := e.d.Config
	now := time.Now().UTC()
	spec := protocol.AgentSpec{Name: c.Agent.Name, Description: c.Agent.Description, InputSchema: c.Agent.InputSchemaJSON(), MaxSteps: c.Agent.MaxTurns, MaxDepth: c.Agent.MaxDepth,
		PlannerMode: c.Planner.Mode, MaxItems: c.Planner.MaxItems, Tools: c.Tools.Enabled, Updated: now,
		Expires: now.Add(c.Mesh.AgentTTLOrDefault()), Executor: e.d.ID}
	if c.Memory.ShareWithParent {
		spec.Share = &protocol.ShareSpec{MaxFindings: c.Memory.ShareMaxFindings, MaxChars: c.Memory.ShareMaxChars}
	}
	if !c.Agent.Budget.IsZero() {
		b := c.Agent.Budget
		spec.Budget = &b
	}
	data, err := protocol.Marshal(&spec)
	if err != nil {
		return err
	}
	if _, err := e.agents.Put(ctx, c.Agent.Name, data); err != nil {
		return fmt.Errorf("register agent %s: %w", c.Agent.Name, err)
	}
	return nil
}

// keepRegistered refreshes the registration three times per mesh.agent_ttl until ctx ends.
func (e *Executor) keepRegistered(ctx context.Context) {
	t := time.NewTicker(e.d.Config.Mesh.AgentTTLOrDefault() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.heartbeat(ctx); err != nil && ctx.Err() == nil {
				e.d.Logger.Warn("agent registration heartbeat", "err", err)
			}
		}
	}
}

// Serve pulls and runs steps until ctx ends.
func (e *Executor) Serve(ctx context.Context) error {
	agent := e.d.Config.Agent.Name
	spec, err := bus.Consumers(e.d.Names, bus.KindExecutor, agent, e.d.Config.Mesh.AckWaitOrZero())
	if err != nil {
		return fmt.Errorf("executor consumer for %s: %w", agent, err)
	}
	// A busy executor pulls nothing it cannot start, so it never holds work another one could run.
	w, err := worker.New(ctx, e.d.Conn, e.d.Names, spec, worker.Options{Workers: e.d.Concurrency,
		MaxWaiting: e.d.Config.Executor.MaxWaiting, Logger: e.d.Logger}, e.handle)
	if err != nil {
		return fmt.Errorf("executor consumer for %s: %w", agent, err)
	}
	defer e.watch.Stop()
	go e.keepRegistered(ctx)
	if e.d.Ready != nil {
		close(e.d.Ready)
	}
	e.d.Logger.Info("executor ready", "id", e.d.ID, "agent", agent, "model", e.d.Config.ForRole(protocol.RoleExecutor).Model,
		"concurrency", e.d.Concurrency)
	return w.Run(ctx)
}

// handle runs one step. The worker heartbeats it while it runs, acks on nil, and sends
// undecodable steps, and steps refused by admit, to the DLQ.
func (e *Executor) handle(ctx context.Context, msg jetstream.Msg) error {
	var step protocol.Step
	if err := worker.Decode(msg, &step); err != nil {
		return err
	}
	if err := protocol.CheckIDs(&step); err != nil {
		return worker.Permanent(fmt.Errorf("step on %s refused: %w", msg.Subject(), err))
	}
	if done, err := e.admit(ctx, step); err != nil || done {
		return err
	}
	if rec, ok := e.recordedResult(ctx, step); ok {
		// Finished before, but the planner has not seen it (the result may be older than the
		// RESULTS dedup window): answer with the same result again instead of running twice.
		if err := e.publishResult(ctx, rec); err != nil {
			return fmt.Errorf("republish recorded result of %s/%s: %w", step.SessionID, step.StepID, err)
		}
		return nil
	}
	res := e.RunStep(ctx, step)
	if ctx.Err() != nil {
		// Shutting down: the worker hands the step to another executor.
		return fmt.Errorf("step %s/%s cut short: %w", step.SessionID, step.StepID, context.Cause(ctx))
	}
	e.recordResult(ctx, res)
	if err := e.publishResult(ctx, res); err != nil {
		return fmt.Errorf("publish result of %s/%s: %w", step.SessionID, step.StepID, err)
	}
	return nil
}

// admit decides whether a step runs. A step already done (a redelivery) is acked without
// running (done). A step whose session the sessions bucket does not know, or whose session
// ended before the step ran, is refused (a worker.Permanent error: the DLQ, with the reason):
// nobody waits for its result and its tools must not run. A session that cannot be read now
// is an ordinary error: the step is delivered again later.
func (e *Executor) admit(ctx context.Context, step protocol.Step) (done bool, err error) {
	s, err := e.sessions.Get(ctx, step.SessionID)
	switch {
	case errors.Is(err, session.ErrNotFound):
		return false, worker.Permanent(fmt.Errorf("step %s refused: session %s does not exist (sessions bucket); nothing was run",
			step.StepID, step.SessionID))
	case errors.Is(err, session.ErrUnreadable):
		return false, worker.Permanent(fmt.Errorf("step %s refused: %w", step.StepID, err))
	case err != nil:
		return false, err
	}
	for _, p := range s.Plan {
		if p.StepID == step.StepID && p.Status == protocol.StepDone {
			return true, nil
		}
	}
	if s.Status != protocol.StatusDone {
		return false, nil
	}
	if _, ok := e.recordedResult(ctx, step); ok {
		return true, nil // it ran before its session ended: a redelivery
	}
	how := string(s.Outcome)
	if how == "" {
		how = "no outcome"
	}
	return false, worker.Permanent(fmt.Errorf("step %s refused: session %s ended (%s) before the step ran; nothing was run",
		step.StepID, step.SessionID, how))
}

func (e *Executor) publishResult(ctx context.Context, res protocol.StepResult) error {
	// The trace must be stored before the result, so the planner's usage total sees every call.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.trace.Flush(fctx); err != nil {
		return err
	}
	res.Executor = e.d.ID
	data, err := protocol.Marshal(&res)
	if err != nil {
		return err
	}
	_, err = e.d.Conn.JS.Publish(fctx, e.d.Names.Result(res.SessionID), data,
		jetstream.WithMsgID(protocol.ResultMsgID(res.SessionID, res.StepID)))
	return err
}

func stepKey(step protocol.Step) string { return step.SessionID + "." + step.StepID }

// recordedResult returns the result a finished run of step recorded.
func (e *Executor) recordedResult(ctx context.Context, step protocol.Step) (protocol.StepResult, bool) {
	var res protocol.StepResult
	entry, err := e.steps.Get(ctx, stepKey(step))
	if err != nil {
		if !bus.IsNotFound(err) {
			e.d.Logger.Warn("read step record", "session", step.SessionID, "step", step.StepID, "err", err)
		}
		return res, false
	}
	if err := protocol.Unmarshal(entry.Value(), &res); err != nil {
		e.d.Logger.Warn("unreadable step record; running the step", "session", step.SessionID, "step", step.StepID, "err", err)
		return res, false
	}
	return res, true
}

// recordResult keeps a finished step's result for redeliveries. A failure to record is logged:
// the result still goes out, and the tool call records still keep effects from repeating.
func (e *Executor) recordResult(ctx context.Context, res protocol.StepResult) {
	res.Executor = e.d.ID
	data, err := protocol.Marshal(&res)
	if err == nil {
		_, err = e.steps.Put(ctx, res.SessionID+"."+res.StepID, data)
	}
	if err != nil {
		e.d.Logger.Warn("record step result", "session", res.SessionID, "step", res.StepID, "err", err)
	}
}
