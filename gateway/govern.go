package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/govern"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
)

// maxCascade bounds how many sessions one cancel walks down the lineage.
const maxCascade = 1000

// errNoSession is the gateway's answer for an unknown session id.
var errNoSession error = &protocol.Error{Code: protocol.CodeNotFound, Msg: "no such session"}

// updateSession is session.Records.Update answering errNoSession for an unknown session.
func (g *Gateway) updateSession(ctx context.Context, id string, change func(*protocol.Session) (bool, error)) (protocol.Session, bool, error) {
	s, changed, err := g.sessions.Update(ctx, id, change)
	if errors.Is(err, session.ErrNotFound) {
		err = fmt.Errorf("%w: %s", errNoSession, id)
	}
	return s, changed, err
}

// governNew fills a new session's budget, deadline and lineage: the tighter of the agent's
// agent.budget and the task's budget, and for a child its root and a deadline no later than its
// parent's. A child of a cancelled parent is refused.
func (g *Gateway) governNew(ctx context.Context, sess *protocol.Session, in protocol.SubmitRequest) error {
	var b protocol.Budget
	if entry, err := g.agents.Get(ctx, in.Agent); err == nil {
		var spec protocol.AgentSpec
		if protocol.Unmarshal(entry.Value(), &spec) == nil && spec.Budget != nil {
			b = *spec.Budget
		}
	}
	if in.Budget != nil {
		if err := govern.Validate(*in.Budget); err != nil {
			return fmt.Errorf("%w: %v", ErrRejected, err)
		}
		b = b.Tighter(*in.Budget)
	}
	if !b.IsZero() {
		sess.Budget = &b
	}
	if b.DeadlineS > 0 {
		sess.Deadline = sess.Created.Add(time.Duration(b.DeadlineS * float64(time.Second)))
	}
	if in.Parent == "" {
		return nil
	}
	parent, err := g.sessions.Get(ctx, in.Parent)
	if err != nil {
		if errors.Is(err, session.ErrNotFound) {
			return nil // a parent outside this mesh's records: the child is a root of its own
		}
		return fmt.Errorf("read parent session %s: %w", in.Parent, err)
	}
	if parent.Cancel != nil {
		return fmt.Errorf("%w: parent session %s was cancelled", ErrRejected, in.Parent)
	}
	sess.Root = parent.Root
	if sess.Root == "" {
		sess.Root = parent.SessionID
	}
	if !parent.Deadline.IsZero() && (sess.Deadline.IsZero() || parent.Deadline.Before(sess.Deadline)) {
		sess.Deadline = parent.Deadline
	}
	return nil
}

// linkChild records a new child in its parent's record, so a cancel of the parent reaches it.
// It refuses the child when the parent is cancelled meanwhile.
func (g *Gateway) linkChild(ctx context.Context, parent, child string) error {
	_, _, err := g.updateSession(ctx, parent, func(s *protocol.Session) (bool, error) {
		if s.Cancel != nil {
			return false, fmt.Errorf("%w: parent session %s was cancelled", ErrRejected, parent)
		}
		if slices.Contains(s.Children, child) {
			return false, nil
		}
		s.Children = append(s.Children, child)
		return true, nil
	})
	if errors.Is(err, errNoSession) {
		return nil // a parent outside this mesh's records
	}
	return err
}

// Cancel marks a session cancelled, tells every process working for it, and cancels its child
// sessions down the lineage. Cancelling a session that has ended changes nothing and says so.
func (g *Gateway) Cancel(ctx context.Context, req protocol.CancelRequest) (protocol.CancelReply, error) {
	if err := protocol.IDSession.Check(req.SessionID); err != nil {
		return protocol.CancelReply{}, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if req.By == "" {
		req.By = "unknown"
	}
	seen := map[string]bool{}
	return g.cancel(ctx, req, seen)
}

func (g *Gateway) cancel(ctx context.Context, req protocol.CancelRequest, seen map[string]bool) (protocol.CancelReply, error) {
	seen[req.SessionID] = true
	rep := protocol.CancelReply{SessionID: req.SessionID}
	mark := &protocol.CancelMark{By: req.By, Reason: req.Reason, At: time.Now().UTC()}
	sess, changed, err := g.updateSession(ctx, req.SessionID, func(s *protocol.Session) (bool, error) {
		if s.Status == protocol.StatusDone || s.Cancel != nil {
			return false, nil
		}
		s.Cancel = mark
		return true, nil
	})
	if err != nil {
		return rep, err
	}
	switch {
	case sess.Status == protocol.StatusDone && !changed:
		rep.Status, rep.Outcome, rep.NoOp = protocol.CancelStatusAlreadyFinished, sess.Outcome, true
		return rep, nil
	case !changed:
		rep.Status, rep.NoOp = protocol.CancelStatusAlreadyCancelled, true
	default:
		rep.Status = protocol.CancelStatusCancelling
		ev := protocol.Event{SessionID: req.SessionID, Type: protocol.EvCancel, Time: mark.At, Source: "gateway",
			Agent: sess.Agent, Reason: req.Reason, Attrs: map[string]string{"by": req.By}}
		if data, err := protocol.Marshal(&ev); err == nil {
			if _, err := g.d.Conn.JS.Publish(ctx, g.d.Names.Trace(req.SessionID), data, jetstream.WithMsgID(req.SessionID+"/cancel")); err != nil {
				g.d.Logger.Warn("trace cancel", "session", req.SessionID, "err", err)
			}
		}
	}
	// The notice goes out again for an already cancelled session: it is idempotent, and it
	// stops work a process may have started from a message that arrived late.
	notice := protocol.CancelNotice{SessionID: req.SessionID, By: req.By, Reason: req.Reason}
	if sess.Cancel != nil {
		notice.By, notice.Reason = sess.Cancel.By, sess.Cancel.Reason
	}
	data, err := protocol.Marshal(&notice)
	if err != nil {
		return rep, err
	}
	if err := g.d.Conn.NC.Publish(g.d.Names.CancelNotice(req.SessionID), data); err != nil {
		return rep, fmt.Errorf("announce cancel of %s: %w", req.SessionID, err)
	}
	for _, child := range sess.Children {
		if seen[child] || len(seen) >= maxCascade {
			continue
		}
		creq := protocol.CancelRequest{SessionID: child, By: req.By, Reason: fmt.Sprintf("parent session %s was cancelled", req.SessionID)}
		crep, err := g.cancel(ctx, creq, seen)
		if err != nil {
			g.d.Logger.Warn("cancel child session", "parent", req.SessionID, "child", child, "err", err)
			continue
		}
		if !crep.NoOp || crep.Status == protocol.CancelStatusAlreadyCancelled {
			rep.Children = append(rep.Children, child)
		}
		rep.Children = append(rep.Children, crep.Children...)
	}
	return rep, nil
}

// handleCancel serves the cancel subject; a refusal goes out as handleSubmit's do.
func (g *Gateway) handleCancel(req micro.Request) {
	var reply protocol.CancelReply
	ct, in, err := readRequest[protocol.CancelRequest](req, "cancel")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reply, err = g.Cancel(ctx, in)
		cancel()
	}
	reply.SessionID = in.SessionID
	if err != nil {
		reply.Fail(coded(err))
	}
	bus.Respond(req, ct, &reply)
}
