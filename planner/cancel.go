package planner

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// cancelGrace is how long a cancelled session waits for the executors running its steps to
// report before the planner ends it anyway (an executor may be gone). Executors normally report
// within milliseconds of the notice; the session must end within 2 s.
const cancelGrace = 1200 * time.Millisecond

// watchCancels takes cancel notices in the planners' queue group: one planner ends each
// cancelled session. A notice missed while no planner runs is not lost: the cancel flag is in
// the session record, and every path below checks it.
func (p *Planner) watchCancels(ctx context.Context) (*nats.Subscription, error) {
	return p.d.Conn.NC.QueueSubscribe(p.d.Names.CancelNoticeAll(), protocol.QueuePlanner, func(m *nats.Msg) {
		var n protocol.CancelNotice
		if protocol.Unmarshal(m.Data, &n) != nil || n.SessionID == "" {
			return
		}
		go p.onCancel(ctx, n.SessionID)
	})
}

func (p *Planner) onCancel(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(ctx, resultTimeout)
	defer cancel()
	sess, err := p.get(cctx, id)
	if err != nil || sess.Status == protocol.StatusDone || sess.Cancel == nil {
		return
	}
	if running(sess.Plan) == 0 {
		if err := p.finish(cctx, sess); err != nil {
			p.d.Logger.Warn("end cancelled session", "session", id, "err", err)
		}
		return
	}
	// Steps are running: their executors report cancelled (with what they spent) through
	// RESULTS, and onResult ends the session. Should one not answer, end it after the grace.
	time.AfterFunc(cancelGrace, func() {
		cctx, cancel := context.WithTimeout(ctx, resultTimeout)
		defer cancel()
		sess, err := p.get(cctx, id)
		if err != nil || sess.Status == protocol.StatusDone {
			return
		}
		if err := p.finish(cctx, sess); err != nil {
			p.d.Logger.Warn("end cancelled session", "session", id, "err", err)
		}
	})
}

// settleCancelled ends a cancelled session once none of its steps is still running; no further
// step is published for it.
func (p *Planner) settleCancelled(ctx context.Context, sess protocol.Session) error {
	if running(sess.Plan) > 0 {
		return nil
	}
	return p.finish(ctx, sess)
}

// running counts the steps handed to executors that have not reported.
func running(plan []protocol.PlanStep) int {
	n := 0
	for _, s := range plan {
		if s.Status == protocol.StepPublished {
			n++
		}
	}
	return n
}

// cancelReason is the session's reason when it was cancelled.
func cancelReason(m *protocol.CancelMark) string {
	r := "cancelled by " + m.By
	if m.Reason != "" {
		r += ": " + m.Reason
	}
	return r
}
