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

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
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
}

// Planner holds the open buckets and publishers.
type Planner struct {
	d        Deps
	sessions jetstream.KeyValue
	trace    *trace.Publisher
}

// Run serves until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if d.ID == "" {
		host, _ := os.Hostname()
		d.ID = fmt.Sprintf("planner@%s/%d", host, os.Getpid())
	}
	sessions, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketSessions)
	if err != nil {
		return err
	}
	p := &Planner{d: d, sessions: sessions, trace: trace.NewPublisher(d.Conn.JS, d.Names, d.ID)}

	tasks, err := d.Conn.JS.CreateOrUpdateConsumer(ctx, d.Names.Stream(protocol.StreamTasks), jetstream.ConsumerConfig{
		Durable: protocol.ConsumerPlanner, FilterSubject: d.Names.TaskAll(),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 10,
	})
	if err != nil {
		return fmt.Errorf("planner tasks consumer: %w", err)
	}
	results, err := d.Conn.JS.CreateOrUpdateConsumer(ctx, d.Names.Stream(protocol.StreamResults), jetstream.ConsumerConfig{
		Durable: protocol.ConsumerPlannerResults, FilterSubject: d.Names.ResultAll(),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 10,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("planner results consumer: %w", err)
	}
	// Handlers run to completion on shutdown: a session half-finished by a stopping planner would
	// be finished again, its last events repeated, by the next one.
	hctx := context.WithoutCancel(ctx)
	tc, err := tasks.Consume(func(m jetstream.Msg) { p.handle(hctx, m, p.onTask) })
	if err != nil {
		return fmt.Errorf("planner consume tasks: %w", err)
	}
	rc, err := results.Consume(func(m jetstream.Msg) { p.handle(hctx, m, p.onResult) })
	if err != nil {
		tc.Stop()
		return fmt.Errorf("planner consume results: %w", err)
	}
	d.Logger.Info("planner ready", "id", d.ID)
	<-ctx.Done()
	tc.Drain()
	rc.Drain()
	<-tc.Closed()
	<-rc.Closed()
	return nil
}

// permanent marks errors that no redelivery can fix.
type permanent struct{ error }

func (p *Planner) handle(ctx context.Context, m jetstream.Msg, fn func(context.Context, []byte) error) {
	hctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	err := fn(hctx, m.Data())
	var perm permanent
	switch {
	case err == nil:
		_ = m.Ack()
	case errors.As(err, &perm):
		p.d.Logger.Error("dropping message", "subject", m.Subject(), "err", err)
		_ = m.Term()
	default:
		p.d.Logger.Warn("will retry message", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Second)
	}
}

// update applies fn to the session under compare-and-set, retrying when another planner wrote
// in between. fn returns false to leave the session unchanged.
func (p *Planner) update(ctx context.Context, id string, fn func(*protocol.Session) (bool, error)) (protocol.Session, error) {
	var out protocol.Session
	b := backoff.WithContext(backoff.WithMaxRetries(backoff.NewConstantBackOff(20*time.Millisecond), 50), ctx)
	err := backoff.Retry(func() error {
		entry, err := p.sessions.Get(ctx, id)
		if err != nil {
			if bus.IsNotFound(err) {
				return backoff.Permanent(permanent{fmt.Errorf("session %s not found", id)})
			}
			return err
		}
		var s protocol.Session
		if err := protocol.Unmarshal(entry.Value(), &s); err != nil {
			return backoff.Permanent(permanent{err})
		}
		changed, err := fn(&s)
		if err != nil {
			return backoff.Permanent(err)
		}
		out = s
		if !changed {
			return nil
		}
		s.Updated = time.Now().UTC()
		data, err := protocol.Marshal(&s)
		if err != nil {
			return backoff.Permanent(err)
		}
		_, err = p.sessions.Update(ctx, id, data, entry.Revision())
		return err
	}, b)
	return out, err
}

func (p *Planner) onTask(ctx context.Context, data []byte) error {
	var t protocol.Task
	if err := protocol.Unmarshal(data, &t); err != nil {
		return permanent{err}
	}
	planned := false
	sess, err := p.update(ctx, t.SessionID, func(s *protocol.Session) (bool, error) {
		if s.Status != protocol.StatusQueued {
			return false, nil // already planned (redelivery or another planner): just republish below
		}
		s.Status = protocol.StatusRunning
		s.Planner = p.d.ID
		s.Plan = p.plan(t)
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

// plan makes the session's steps. This version always plans one step that carries the whole task;
// decomposition with a model arrives with planner.mode auto|force.
func (p *Planner) plan(t protocol.Task) []protocol.PlanStep {
	return []protocol.PlanStep{{StepID: "s1", Status: protocol.StepPending}}
}

// publishReady publishes every step whose dependencies are done. Publishing is idempotent (the
// WORK stream deduplicates on session/step), so a retried call is harmless.
func (p *Planner) publishReady(ctx context.Context, sess protocol.Session) error {
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
			Instruction: s.Instruction, Context: ctxOut, Depth: sess.Depth}
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
	if err := protocol.Unmarshal(data, &r); err != nil {
		return permanent{err}
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
	if !allDone(sess.Plan) {
		return p.publishReady(ctx, sess)
	}
	return p.finish(ctx, sess)
}

// finish writes the session's last two events (its end, then usage) and marks it done. The events
// come first so that a crash in between only repeats them; it never loses them.
func (p *Planner) finish(ctx context.Context, sess protocol.Session) error {
	outcome, text := combine(sess.Plan)
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
		Outcome: outcome, Text: text, Reason: sess.Reason}); err != nil {
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
		s.Status, s.Outcome, s.FinalText = protocol.StatusDone, outcome, text
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
	steps := 0
	for _, ev := range events {
		switch ev.Type {
		case protocol.EvModelCall:
			if ev.Usage != nil {
				acc.Add(ev.Model, ev.Role, ev.Attrs["cache_ttl"], *ev.Usage)
			}
		case protocol.EvStepFinished:
			steps += ev.Turn // an executor reports how many model turns the step took
		}
	}
	r := acc.Report()
	r.Steps = steps
	r.WallTimeS = time.Since(sess.Created).Seconds()
	return r, nil
}

// combine folds step outcomes into the session's: the worst outcome wins, and the answer is the
// last step's text.
func combine(plan []protocol.PlanStep) (protocol.Outcome, string) {
	rank := map[protocol.Outcome]int{
		protocol.OutcomeSuccess: 0, protocol.OutcomeSuccessWithRecovery: 1, protocol.OutcomeIncomplete: 2,
		protocol.OutcomeIncompleteToolFail: 3, protocol.OutcomeBudgetExceeded: 4, protocol.OutcomeCancelled: 5, protocol.OutcomeFailed: 6,
	}
	out := protocol.OutcomeSuccess
	var texts []string
	for _, s := range plan {
		if rank[s.Outcome] > rank[out] {
			out = s.Outcome
		}
		if s.FinalText != "" {
			texts = append(texts, s.FinalText)
		}
	}
	text := ""
	if len(texts) > 0 {
		text = texts[len(texts)-1]
	}
	return out, strings.TrimSpace(text)
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
