// Package executor runs steps: it pulls work for one agent from WORK, runs the ReAct loop with a
// model and the agent's tools, traces every action and publishes the step's result to RESULTS.
// Executors of one agent share one durable consumer, so starting more processes scales the agent.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
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
	// Concurrency is how many steps this process runs at once (default 4).
	Concurrency int
}

// ackWait is how long a step may go without a heartbeat before JetStream redelivers it. A
// variable so tests can prove the heartbeat with a short one.
var ackWait = 30 * time.Second

// Executor runs steps for one agent.
type Executor struct {
	d        Deps
	model    llm.Backend
	sessions jetstream.KeyValue
	trace    *trace.Publisher
	// watch stops the steps of cancelled sessions; ledger charges budgets mesh-wide.
	watch  *govern.Watcher
	ledger *govern.Ledger
	// window and maxOut are the model's context window and output limit (0: unknown).
	window, maxOut int
	// objects is the payloads object store (transcripts), opened on first use.
	objMu   sync.Mutex
	objects jetstream.ObjectStore
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
		d.Concurrency = 4
	}
	model := d.Backend
	if model == nil {
		var err error
		if model, err = llm.New(d.Config.ForRole(protocol.RoleExecutor), llm.WithLogger(d.Logger)); err != nil {
			return nil, fmt.Errorf("executor model: %w", err)
		}
	}
	sessions, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketSessions)
	if err != nil {
		return nil, err
	}
	e := &Executor{d: d, model: model, sessions: sessions, trace: trace.NewPublisher(d.Conn.JS, d.Names, d.ID)}
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

// register publishes the agent's spec so the gateway accepts its tasks.
func (e *Executor) register(ctx context.Context) error {
	kv, err := bus.KV(ctx, e.d.Conn.JS, e.d.Names, protocol.BucketAgents)
	if err != nil {
		return err
	}
	c := e.d.Config
	spec := protocol.AgentSpec{Name: c.Agent.Name, MaxSteps: c.Agent.MaxSteps, MaxDepth: c.Agent.MaxDepth,
		PlannerMode: c.Planner.Mode, MaxItems: c.Planner.MaxItems, Tools: c.Tools.Enabled, Updated: time.Now().UTC()}
	if !c.Agent.Budget.IsZero() {
		b := c.Agent.Budget
		spec.Budget = &b
	}
	data, err := protocol.Marshal(&spec)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, c.Agent.Name, data); err != nil {
		return fmt.Errorf("register agent %s: %w", c.Agent.Name, err)
	}
	return nil
}

// Serve pulls and runs steps until ctx ends.
func (e *Executor) Serve(ctx context.Context) error {
	agent := e.d.Config.Agent.Name
	cons, err := e.d.Conn.JS.CreateOrUpdateConsumer(ctx, e.d.Names.Stream(protocol.StreamWork), jetstream.ConsumerConfig{
		Durable:       e.d.Names.ExecutorConsumer(agent),
		FilterSubject: e.d.Names.Work(agent),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    5,
		MaxAckPending: 1000,
	})
	if err != nil {
		return fmt.Errorf("executor consumer for %s: %w", agent, err)
	}
	e.d.Logger.Info("executor ready", "id", e.d.ID, "agent", agent, "model", e.d.Config.ForRole(protocol.RoleExecutor).Model)
	// Pull one message at a time, and only while a worker slot is free, so a busy executor never
	// holds work another one could start.
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		return fmt.Errorf("executor pull for %s: %w", agent, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer e.watch.Stop()
	sem := make(chan struct{}, e.d.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := it.Next()
		if err != nil {
			<-sem
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			e.d.Logger.Warn("pull work", "err", err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e.handle(ctx, msg)
		}()
	}
}

func (e *Executor) handle(ctx context.Context, msg jetstream.Msg) {
	var step protocol.Step
	if err := protocol.Unmarshal(msg.Data(), &step); err != nil {
		e.d.Logger.Error("dropping undecodable step", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if done, err := e.alreadyDone(ctx, step); err != nil {
		e.d.Logger.Warn("check step state", "session", step.SessionID, "err", err)
	} else if done {
		_ = msg.Ack()
		return
	}
	// Heartbeat while the step runs so slow model calls and tools are not redelivered.
	hbCtx, stopHB := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	res := e.RunStep(ctx, step)
	stopHB()
	if ctx.Err() != nil {
		return // shutting down: leave the message to be redelivered to another executor
	}
	if err := e.publishResult(ctx, res); err != nil {
		e.d.Logger.Error("publish result", "session", step.SessionID, "step", step.StepID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// alreadyDone makes a redelivered step a no-op once its result is recorded.
func (e *Executor) alreadyDone(ctx context.Context, step protocol.Step) (bool, error) {
	entry, err := e.sessions.Get(ctx, step.SessionID)
	if err != nil {
		if bus.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	var s protocol.Session
	if err := protocol.Unmarshal(entry.Value(), &s); err != nil {
		return false, err
	}
	if s.Status == protocol.StatusDone {
		return true, nil
	}
	for _, p := range s.Plan {
		if p.StepID == step.StepID && p.Status == protocol.StepDone {
			return true, nil
		}
	}
	return false, nil
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
