// Package planner turns a task into steps, hands ready steps to executors through WORK, collects
// their results from RESULTS and finishes the session. All of its state lives in the sessions KV,
// so any planner process can pick up a session another one started.
package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/pkg/session"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/pkg/usage"
)

// Deps are what a planner needs.
type Deps struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string
	// ID names this planner in session state (default: host and pid).
	ID string
	// Ready, when set, is closed once the planner's consumers are in place.
	Ready chan<- struct{}
}

// Planner holds the open buckets and publishers.
type Planner struct {
	d        Deps
	sessions *session.Records
	ledger   *govern.Ledger
	trace    *trace.Publisher
	// mode is planner.mode; model, built once at start, is nil when mode is off.
	mode     string
	maxItems int
	model    llm.Backend
}

// Handler deadlines. Planning may wait on a model, so a task gets longer than a result; the
// message is kept alive by heartbeats meanwhile.
const (
	taskTimeout   = 3 * time.Minute
	resultTimeout = 25 * time.Second
)

// Run serves until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if d.ID == "" {
		host, _ := os.Hostname()
		d.ID = fmt.Sprintf("planner@%s/%d", host, os.Getpid())
	}
	sessions, err := session.Open(ctx, d.Conn.JS, d.Names)
	if err != nil {
		return err
	}
	// The ledger charges the planning calls to the session tree, as the executors charge theirs.
	ledger, err := govern.OpenLedger(ctx, d.Conn.JS, d.Names)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	p := &Planner{d: d, sessions: sessions, ledger: ledger, trace: trace.NewPublisher(d.Conn.JS, d.Names, d.ID)}
	if err := p.configure(); err != nil {
		return err
	}

	// Sessions are handled concurrently by a bounded pool per consumer (settings in
	// bus.Consumers); sessions are compare-and-set in KV, so two results of one session handled
	// at once are safe. Handlers get a short grace to finish on shutdown (a session half-finished
	// by a stopping planner is finished again, its last events repeated, by the next one), but
	// not a planning model call's whole deadline.
	workers := make([]*worker.Worker, 0, 2)
	for _, c := range []struct {
		kind    string
		timeout time.Duration
		fn      func(context.Context, jetstream.Msg) error
	}{{bus.KindPlannerTasks, taskTimeout, data(p.onTask)}, {bus.KindPlannerResults, resultTimeout, data(p.onResult)},
		{bus.KindPlannerDead, resultTimeout, p.onDeadLetter}} {
		spec, err := bus.Consumers(d.Names, c.kind, "", d.Config.Mesh.AckWaitOrZero())
		if err != nil {
			return err
		}
		w, err := worker.New(ctx, d.Conn, d.Names, spec, worker.Options{Timeout: c.timeout, Grace: service.ShutdownGrace, Logger: d.Logger}, handler(c.fn))
		if err != nil {
			return fmt.Errorf("planner: %w", err)
		}
		workers = append(workers, w)
	}
	// Cancel notices end a session's waiting for its running steps (see watchCancels).
	csub, err := p.watchCancels(ctx)
	if err != nil {
		return fmt.Errorf("planner cancel notices: %w", err)
	}
	defer func() { _ = csub.Unsubscribe() }()
	agents, err := p.agentsBucket(ctx)
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	go p.watchUnserved(ctx, agents)
	if d.Ready != nil {
		close(d.Ready)
	}
	d.Logger.Info("planner ready", "id", d.ID, "mode", p.mode)
	errs := make(chan error, len(workers))
	for _, w := range workers {
		go func() { errs <- w.Run(ctx) }()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// configure reads planner.mode and planner.max_items and builds the planning model unless
// planning is off.
func (p *Planner) configure() error {
	cfg := p.d.Config
	if cfg == nil {
		cfg = config.Default()
		p.d.Config = cfg
	}
	p.mode = strings.ToLower(strings.TrimSpace(cfg.Planner.Mode))
	switch p.mode {
	case "":
		p.mode = ModeOff
	case ModeOff, ModeAuto, ModeForce:
	default:
		return fmt.Errorf("planner.mode %q is not one of off, auto, force", cfg.Planner.Mode)
	}
	p.maxItems = cfg.Planner.MaxItems
	if p.maxItems <= 0 {
		p.maxItems = defaultMaxItems
	}
	if p.mode == ModeOff {
		return nil
	}
	model, err := llm.New(cfg.ForRole(protocol.RolePlanner), llm.WithLogger(p.d.Logger))
	if err != nil {
		return fmt.Errorf("planner model: %w", err)
	}
	p.model = model
	return nil
}

// permanent marks errors that no redelivery can fix.
type permanent struct{ error }

// handler adapts a message handler to the worker: a permanent error sends the message to the
// DLQ, any other is retried.
func handler(fn func(context.Context, jetstream.Msg) error) worker.Handler {
	return func(ctx context.Context, m jetstream.Msg) error {
		err := fn(ctx, m)
		var perm permanent
		if errors.As(err, &perm) {
			return worker.Permanent(err)
		}
		return err
	}
}

// data adapts a handler of a message's body.
func data(fn func(context.Context, []byte) error) func(context.Context, jetstream.Msg) error {
	return func(ctx context.Context, m jetstream.Msg) error { return fn(ctx, m.Data()) }
}

// update is session.Records.Update with the planner's errors (see sessionErr).
func (p *Planner) update(ctx context.Context, id string, fn func(*protocol.Session) (bool, error)) (protocol.Session, error) {
	s, _, err := p.sessions.Update(ctx, id, fn)
	return s, sessionErr(id, err)
}

func (p *Planner) onTask(ctx context.Context, data []byte) error {
	var t protocol.Task
	if err := protocol.UnmarshalChecked(data, &t); err != nil {
		return permanent{fmt.Errorf("undecodable task: %w", err)}
	}
	// The model is asked before the compare-and-set, and only while the session is queued; if
	// another planner's plan lands first, the CAS below finds the session running and this plan
	// is dropped.
	cur, err := p.get(ctx, t.SessionID)
	if err != nil {
		return err
	}
	if cur.Cancel != nil && cur.Status != protocol.StatusDone {
		return p.settleCancelled(ctx, cur) // cancelled while queued: never planned, never run
	}
	var plan []protocol.PlanStep
	if cur.Status == protocol.StatusQueued {
		plan = p.plan(ctx, t, cur)
	}
	planned := false
	sess, err := p.update(ctx, t.SessionID, func(s *protocol.Session) (bool, error) {
		if s.Status != protocol.StatusQueued || plan == nil {
			return false, nil // already planned (redelivery or another planner): just republish below
		}
		s.Status = protocol.StatusRunning
		s.Planner = p.d.ID
		s.Plan = plan
		planned = true
		return true, nil
	})
	if err != nil {
		return err
	}
	if sess.Status == protocol.StatusDone {
		return nil
	}
	if planned {
		if err := p.trace.Emit(protocol.Event{SessionID: t.SessionID, Type: protocol.EvPlan, Agent: t.Agent, Role: protocol.RolePlanner, Plan: sess.Plan}); err != nil {
			return err
		}
	}
	return p.publishReady(ctx, sess)
}

// errSessionNotFound is retried, not dead-lettered at once: on a cluster a KV read may be served
// by a replica that has not yet seen the gateway's write (the session is written before its
// task is published). A session that stays missing runs out of deliveries into the DLQ.
func errSessionNotFound(id string) error {
	return fmt.Errorf("session %s %w (yet)", id, errNoSession)
}

var errNoSession = errors.New("not found")

// get reads a session's current state.
func (p *Planner) get(ctx context.Context, id string) (protocol.Session, error) {
	s, err := p.sessions.Get(ctx, id)
	return s, sessionErr(id, err)
}

// sessionErr is how a session that cannot be read fails a message: a missing one is tried
// again (errSessionNotFound), an unreadable one is permanent.
func sessionErr(id string, err error) error {
	switch {
	case errors.Is(err, session.ErrNotFound):
		return errSessionNotFound(id)
	case errors.Is(err, session.ErrUnreadable):
		return permanent{err}
	}
	return err
}

// plan makes the session's steps: one step carrying the whole task when planning is off, else
// the planning model's plan (see decompose).
func (p *Planner) plan(ctx context.Context, t protocol.Task, sess protocol.Session) []protocol.PlanStep {
	if p.mode == ModeOff || p.model == nil || t.Previous != "" {
		return singleStep() // a conversation's follow-up continues one transcript
	}
	return p.decompose(ctx, t, p.scope(ctx, sess))
}

// publishReady publishes every step whose dependencies are done. Publishing is idempotent (the
// WORK stream deduplicates on session/step), so a retried call is harmless.
func (p *Planner) publishReady(ctx context.Context, sess protocol.Session) error {
	if sess.Cancel != nil {
		return p.settleCancelled(ctx, sess)
	}
	done := map[string]protocol.PlanStep{}
	for _, s := range sess.Plan {
		if s.Status == protocol.StepDone {
			done[s.StepID] = s
		}
	}
	var ready []string
	for _, s := range sess.Plan {
		if s.Status == protocol.StepDone {
			continue
		}
		ok := true
		var ctxOut []protocol.StepOutput
		for _, dep := range s.DependsOn {
			d, fin := done[dep]
			if !fin {
				ok = false
				break
			}
			ctxOut = append(ctxOut, protocol.StepOutput{StepID: dep, Text: d.FinalText})
		}
		if !ok {
			continue
		}
		step := protocol.Step{SessionID: sess.SessionID, StepID: s.StepID, Agent: sess.Agent, Task: sess.Task,
			Instruction: s.Instruction, Context: ctxOut, Depth: sess.Depth, Previous: sess.Previous}
		data, err := protocol.Marshal(&step)
		if err != nil {
			return permanent{err}
		}
		if _, err := p.d.Conn.JS.Publish(ctx, p.d.Names.Work(sess.Agent), data,
			jetstream.WithMsgID(protocol.StepMsgID(sess.SessionID, s.StepID))); err != nil {
			return fmt.Errorf("publish step %s/%s: %w", sess.SessionID, s.StepID, err)
		}
		ready = append(ready, s.StepID)
	}
	if len(ready) == 0 {
		return nil
	}
	_, err := p.update(ctx, sess.SessionID, func(s *protocol.Session) (bool, error) {
		changed := false
		for i := range s.Plan {
			if s.Plan[i].Status == protocol.StepPending && contains(ready, s.Plan[i].StepID) {
				s.Plan[i].Status = protocol.StepPublished
				changed = true
			}
		}
		return changed, nil
	})
	return err
}

func (p *Planner) onResult(ctx context.Context, data []byte) error {
	var r protocol.StepResult
	if err := protocol.UnmarshalChecked(data, &r); err != nil {
		return permanent{fmt.Errorf("undecodable result: %w", err)}
	}
	sess, err := p.update(ctx, r.SessionID, func(s *protocol.Session) (bool, error) {
		for i := range s.Plan {
			if s.Plan[i].StepID == r.StepID {
				if s.Plan[i].Status == protocol.StepDone {
					return false, nil
				}
				s.Plan[i].Status = protocol.StepDone
				s.Plan[i].Outcome = r.Outcome
				s.Plan[i].FinalText = r.FinalText
				if r.Reason != "" && s.Reason == "" {
					s.Reason = r.Reason
				}
				return true, nil
			}
		}
		return false, permanent{fmt.Errorf("session %s has no step %s", r.SessionID, r.StepID)}
	})
	if err != nil {
		return err
	}
	if sess.Status == protocol.StatusDone {
		return nil
	}
	if sess.Cancel != nil {
		return p.settleCancelled(ctx, sess)
	}
	if !allDone(sess.Plan) {
		return p.publishReady(ctx, sess)
	}
	return p.finish(ctx, sess)
}

// finish writes the session's last two events (its end, then usage) and marks it done. The events
// come first so that a crash in between only repeats them; it never loses them.
func (p *Planner) finish(ctx context.Context, sess protocol.Session) error {
	outcome, text := combine(sess.Plan)
	reason := sess.Reason
	if sess.Cancel != nil {
		outcome, reason = protocol.OutcomeCancelled, cancelReason(sess.Cancel)
	}
	evType := protocol.EvFinal
	switch {
	case outcome == protocol.OutcomeFailed:
		evType = protocol.EvFailed
	case !outcome.Succeeded():
		evType = protocol.EvIncomplete
	}
	report, err := p.usage(ctx, sess)
	if err != nil {
		return err
	}
	if err := p.trace.Emit(protocol.Event{SessionID: sess.SessionID, Type: evType, Agent: sess.Agent, Role: protocol.RolePlanner,
		Outcome: outcome, Text: text, Reason: reason}); err != nil {
		return err
	}
	if err := p.trace.Emit(protocol.Event{SessionID: sess.SessionID, Type: protocol.EvUsage, Agent: sess.Agent, Role: protocol.RolePlanner,
		Outcome: outcome, Report: &report}); err != nil {
		return err
	}
	if err := p.trace.Flush(ctx); err != nil {
		return err
	}
	ev := protocol.Event{SessionID: sess.SessionID, Type: protocol.EvUsage, Agent: sess.Agent, Outcome: outcome, Report: &report, Time: time.Now().UTC()}
	if data, err := protocol.Marshal(&ev); err == nil {
		if _, err := p.d.Conn.JS.Publish(ctx, p.d.Names.Usage(sess.Agent), data, jetstream.WithMsgID(sess.SessionID)); err != nil {
			p.d.Logger.Warn("usage publish failed", "session", sess.SessionID, "err", err)
		}
	}
	_, err = p.update(ctx, sess.SessionID, func(s *protocol.Session) (bool, error) {
		if s.Status == protocol.StatusDone {
			return false, nil
		}
		s.Status, s.Outcome, s.FinalText, s.Reason = protocol.StatusDone, outcome, text, reason
		return true, nil
	})
	return err
}

// usage totals every model call recorded in the session's trace, whichever process made it.
func (p *Planner) usage(ctx context.Context, sess protocol.Session) (protocol.UsageReport, error) {
	events, err := trace.Read(ctx, p.d.Conn.JS, p.d.Names, sess.SessionID)
	if err != nil {
		return protocol.UsageReport{}, err
	}
	acc := usage.NewAccumulator(nil)
	turns := 0
	for _, ev := range events {
		switch ev.Type {
		case protocol.EvModelCall:
			if ev.Usage != nil {
				acc.Add(ev.Model, ev.Role, ev.Attrs["cache_ttl"], *ev.Usage)
			}
		case protocol.EvStepFinished:
			turns += ev.Turn // an executor reports how many model turns the step took
		}
	}
	r := acc.Report()
	r.SetTurns(turns)
	r.WallTimeS = time.Since(sess.Created).Seconds()
	return r, nil
}

// combine folds step outcomes into the session's: the worst outcome wins, and the answer is the
// text of the steps nothing depends on (a plan's sinks), joined in plan order.
func combine(plan []protocol.PlanStep) (protocol.Outcome, string) {
	rank := map[protocol.Outcome]int{
		protocol.OutcomeSuccess: 0, protocol.OutcomeSuccessWithRecovery: 1, protocol.OutcomeIncomplete: 2,
		protocol.OutcomeIncompleteToolFail: 3, protocol.OutcomeNotAccomplished: 4, protocol.OutcomeBudgetExceeded: 5,
		protocol.OutcomeCancelled: 6, protocol.OutcomeFailed: 7,
	}
	out := protocol.OutcomeSuccess
	for _, s := range plan {
		if rank[s.Outcome] > rank[out] {
			out = s.Outcome
		}
	}
	return out, strings.Join(sinkTexts(plan), "\n\n")
}

func allDone(plan []protocol.PlanStep) bool {
	for _, s := range plan {
		if s.Status != protocol.StepDone {
			return false
		}
	}
	return len(plan) > 0
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
