package planner

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A session whose agent lost every executor would wait in WORK for as long as WORK keeps
// messages (days), its caller watching a session that never ends. The gateway refuses new tasks
// for such an agent; watchUnserved ends the ones already running: once an agent's registration
// has been lapsed for mesh.queue_timeout, each of its running sessions ends failed, saying why.
// Several planners may sweep at once; the session record's compare-and-set makes one of them win.

// watchUnserved sweeps until ctx ends.
func (p *Planner) watchUnserved(ctx context.Context, agents jetstream.KeyValue) {
	timeout := p.d.Config.Mesh.QueueTimeoutOrDefault()
	t := time.NewTicker(max(time.Second, min(timeout/4, 15*time.Second)))
	defer t.Stop()
	// swept remembers each agent's lapse already swept, so a retired agent whose registration
	// stays lapsed costs one sweep, not one per tick; bounded by the agents bucket.
	swept := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.sweepUnserved(ctx, agents, timeout, swept); err != nil && ctx.Err() == nil {
				p.d.Logger.Warn("sweep of sessions whose agent no executor serves", "err", err)
			}
		}
	}
}

// sweepUnserved ends the running sessions of every agent lapsed for at least timeout.
func (p *Planner) sweepUnserved(ctx context.Context, agents jetstream.KeyValue, timeout time.Duration, swept map[string]time.Time) error {
	now := time.Now()
	lapsed := map[string]time.Time{}
	names, err := agents.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("list agents: %w", err)
	}
	for name := range names.Keys() {
		entry, err := agents.Get(ctx, name)
		if err != nil {
			continue // deleted since the listing
		}
		var spec protocol.AgentSpec
		if protocol.Unmarshal(entry.Value(), &spec) != nil || !spec.Lapsed(now) || now.Sub(spec.Expires) < timeout {
			continue
		}
		if !swept[name].Equal(spec.Expires) {
			lapsed[name] = spec.Expires
		}
	}
	if len(lapsed) == 0 {
		return nil
	}
	running := map[string]time.Time{} // running sessions of lapsed agents: since when unserved
	if err := p.sessions.Each(ctx, func(s protocol.Session) bool {
		if since, ok := lapsed[s.Agent]; ok && s.Status == protocol.StatusRunning {
			running[s.SessionID] = since
		}
		return true
	}); err != nil {
		return err
	}
	var first error
	for id, since := range running {
		if err := p.failUnserved(ctx, id, since, timeout); err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		for name, at := range lapsed {
			swept[name] = at
		}
	}
	return first
}

// failUnserved ends one session failed: every step not yet reported ends failed with the reason.
func (p *Planner) failUnserved(ctx context.Context, id string, since time.Time, timeout time.Duration) error {
	var changed bool
	sess, err := p.update(ctx, id, func(s *protocol.Session) (bool, error) {
		if s.Status == protocol.StatusDone {
			return false, nil
		}
		changed = false
		for i := range s.Plan {
			if s.Plan[i].Status != protocol.StepDone {
				s.Plan[i].Status, s.Plan[i].Outcome = protocol.StepDone, protocol.OutcomeFailed
				changed = true
			}
		}
		if changed {
			s.Reason = fmt.Sprintf("no executor has served agent %q since %s (mesh.queue_timeout %s): its waiting steps were not run; start an executor for the agent and submit again",
				s.Agent, since.UTC().Format(time.RFC3339), timeout)
		}
		return changed, nil
	})
	if err != nil || !changed || sess.Status == protocol.StatusDone {
		return err
	}
	p.d.Logger.Warn("session ended: no executor serves its agent", "session", id, "agent", sess.Agent, "lapsed_at", since)
	return p.finish(ctx, sess)
}

// agentsBucket opens the registrations the sweep reads.
func (p *Planner) agentsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return bus.KV(ctx, p.d.Conn.JS, p.d.Names, protocol.BucketAgents)
}
