package planner

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A session whose task, step or result went to the DLQ moves no more: no role will pick that
// message up again. The planner reads those dead letters (its consumer on the DLQ, old ones
// included, so a dead letter written while no planner ran is not missed) and ends what each
// one stopped, with the dead letter's reason:
//   - a task: the steps never handed to an executor end failed (a task never planned ends as
//     its one step, failed);
//   - a step: that step ends failed, as if its executor had reported the failure, so the steps
//     after it run or the session ends;
//   - a result: it is applied again first (its step did run); only a result that cannot be
//     applied ends its step failed.
// Handling is idempotent (compare-and-set on the session record): a session already done, or a
// dead letter read twice, changes nothing. The work is bounded by the DLQ (mesh.limits.dlq) and
// the consumer's pool.

// onDeadLetter ends what one dead letter stopped.
func (p *Planner) onDeadLetter(ctx context.Context, m jetstream.Msg) error {
	h := m.Headers()
	reason := fmt.Sprintf("dead-lettered after %s deliveries: %s (see `skein dlq`)", h.Get(bus.HeaderDLQDeliveries), h.Get(bus.HeaderDLQReason))
	switch h.Get(bus.HeaderDLQStream) {
	case p.d.Names.Stream(protocol.StreamTasks):
		var t protocol.Task
		if protocol.Unmarshal(m.Data(), &t) != nil || t.SessionID == "" {
			return nil // undecodable: it names no session
		}
		return p.endDead(ctx, t.SessionID, "", "its task was "+reason)
	case p.d.Names.Stream(protocol.StreamWork):
		var st protocol.Step
		if protocol.Unmarshal(m.Data(), &st) != nil || st.SessionID == "" {
			return nil
		}
		return p.endDead(ctx, st.SessionID, st.StepID, fmt.Sprintf("its step %s was %s", st.StepID, reason))
	case p.d.Names.Stream(protocol.StreamResults):
		var r protocol.StepResult
		if protocol.Unmarshal(m.Data(), &r) != nil || r.SessionID == "" {
			return nil
		}
		err := p.onResult(ctx, m.Data())
		var perm permanent
		switch {
		case err == nil, errors.Is(err, errNoSession):
			return nil
		case !errors.As(err, &perm):
			return err
		}
		return p.endDead(ctx, r.SessionID, r.StepID, fmt.Sprintf("the result of its step %s was %s", r.StepID, reason))
	}
	return nil
}

// endDead ends the steps a dead letter stopped: step, or every step not yet handed out when
// step is "" (a task's dead letter). The session then goes on as after a failed step.
func (p *Planner) endDead(ctx context.Context, id, step, reason string) error {
	changed := false
	sess, err := p.update(ctx, id, func(s *protocol.Session) (bool, error) {
		changed = false
		if s.Status == protocol.StatusDone {
			return false, nil
		}
		if len(s.Plan) == 0 {
			s.Plan = singleStep() // never planned
		}
		for i := range s.Plan {
			ps := &s.Plan[i]
			stopped := ps.StepID == step || step == "" && ps.Status == protocol.StepPending
			if ps.Status == protocol.StepDone || !stopped {
				continue
			}
			ps.Status, ps.Outcome = protocol.StepDone, protocol.OutcomeFailed
			changed = true
		}
		if changed {
			if s.Status == protocol.StatusQueued {
				s.Status = protocol.StatusRunning
			}
			if s.Reason == "" {
				s.Reason = reason
			}
		}
		return changed, nil
	})
	switch {
	case errors.Is(err, errNoSession):
		return nil // nothing to end (expired, or never recorded)
	case err != nil:
		return err
	case !changed || sess.Status == protocol.StatusDone:
		return nil
	}
	p.d.Logger.Warn("session stopped by a dead letter", "session", id, "step", step, "reason", reason)
	if sess.Cancel != nil {
		return p.settleCancelled(ctx, sess)
	}
	if !allDone(sess.Plan) {
		return p.publishReady(ctx, sess)
	}
	return p.finish(ctx, sess)
}
