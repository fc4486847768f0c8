// Package miner turns finished sessions into guidelines. A durable consumer on the TRACE stream
// waits for each session's usage event (always the last), reads that session's whole trace with
// direct gets (so the miner keeps no state across restarts and leaves none on the server), mines failure lessons from
// the tools' real errors and success patterns, compresses each into one short imperative
// guideline, and hands them to memoryd with stable candidate keys, so re-mining is idempotent.
// It then marks the guidelines the session had retrieved helpful or harmful.
package miner

import (
	"context"
	"errors"
	"fmt"
	"github.com/skein-mesh/skein/pkg/memory/profile"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/service"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/worker"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
	"github.com/skein-mesh/skein/pkg/usage"
)

// Deps are what the miner runs on. Model is optional: nil means the model of the miner role
// from Config (miner.llm, else llm), and the deterministic template when none can be built.
type Deps struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string

	Model llm.Backend
	// NoModel forces the template even when a model is configured.
	NoModel bool
	// Ready, when set, is closed once the durable consumer is consuming.
	Ready chan<- struct{}
	// Progress, when set, is called by Replay after each session it mined (done of total), so
	// a long replay shows where it is.
	Progress func(done, total int, r *Result)
}

// Result is what mining one session did.
type Result struct {
	Session    string               `json:"session"`
	Agent      string               `json:"agent"`
	Outcome    protocol.Outcome     `json:"outcome"`
	Candidates []protocol.Candidate `json:"candidates"`
	// Cases are the session's distilled episodes; CaseSkips the episodes that got none, and why.
	Cases     []protocol.CaseCandidate `json:"cases,omitempty"`
	CaseSkips []string                 `json:"case_skips,omitempty"`
	Actions   []protocol.IngestAction  `json:"actions"`
	Feedback  protocol.FeedbackRequest `json:"feedback"`
	// ProfilePatches are the patches of the agent's profile this session's evidence proposed.
	ProfilePatches []profile.Patch `json:"profile_patches,omitempty"`
	// Usage is what compression cost (also emitted as model_call events with role miner).
	Usage protocol.Usage `json:"usage"`
}

func (d *Deps) defaults() {
	if d.Config == nil {
		d.Config = config.Default()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
}

// model returns the backend used for compression, or nil for the template.
func (d *Deps) model() llm.Backend {
	if d.NoModel {
		return nil
	}
	if d.Model != nil {
		return d.Model
	}
	cfg := d.Config.ForRole(protocol.RoleMiner)
	err := llm.CheckKey(cfg)
	var m llm.Backend
	if err == nil {
		m, err = newModel(cfg, d.Logger)
	}
	if err != nil {
		d.Logger.Warn("mining with the deterministic template: no model", "err", err)
		d.NoModel = true
		return nil
	}
	d.Model = m
	return m
}

// Run consumes the trace stream until ctx ends.
func Run(ctx context.Context, d Deps) error {
	d.defaults()
	if d.Conn == nil {
		return errors.New("miner: no NATS connection")
	}
	if !d.Config.Miner.Enabled || !d.Config.Memory.Enabled {
		d.Logger.Info("miner idle: miner.enabled or memory.enabled is false")
		if d.Ready != nil {
			close(d.Ready)
		}
		<-ctx.Done()
		return nil
	}
	d.model() // resolve once, so every session uses the same backend
	// A session being mined when the miner stops gets a short grace to finish (an abandoned one is
	// mined again after redelivery, repeating its closing trace events); after it, mining is cut,
	// since memoryd may be stopping too and the miner must not hold a shutdown for minutes. A
	// session that cannot be mined in a few minutes (memoryd down) is retried later rather than
	// holding up every session behind it.
	spec, err := bus.Consumers(d.Names, bus.KindMiner, "", d.Config.Mesh.AckWaitOrZero())
	if err != nil {
		return err
	}
	w, err := worker.New(ctx, d.Conn, d.Names, spec, worker.Options{Timeout: 3 * time.Minute, Grace: service.ShutdownGrace,
		NakDelay: 5 * time.Second, Logger: d.Logger}, func(hctx context.Context, msg jetstream.Msg) error { return handle(hctx, &d, msg) })
	if err != nil {
		return fmt.Errorf("miner: %w", err)
	}
	if d.Ready != nil {
		close(d.Ready)
	}
	d.Logger.Info("miner consuming", "stream", spec.Stream, "template", d.NoModel)
	return w.Run(ctx)
}

// handle mines the session a usage event ends; every other trace event is acked unread. The
// worker heartbeats the message while mining waits on a model.
func handle(ctx context.Context, d *Deps, msg jetstream.Msg) error {
	var ev protocol.Event
	if err := worker.Decode(msg, &ev); err != nil {
		return err
	}
	if ev.Type != protocol.EvUsage || ev.Role == protocol.RoleMiner {
		return nil
	}
	res, err := MineSession(ctx, *d, ev.SessionID)
	if errors.Is(err, ErrNoTrace) || errors.Is(err, errBadSession) {
		// Nothing to retry: the trace aged out of the stream, or the id is not a session's.
		return worker.Permanent(fmt.Errorf("session %s not mined: %w", ev.SessionID, err))
	}
	if err != nil {
		return fmt.Errorf("mining session %s: %w", ev.SessionID, err)
	}
	d.Logger.Info("mined", "session", ev.SessionID, "candidates", len(res.Candidates), "helpful", len(res.Feedback.Helpful),
		"harmful", len(res.Feedback.Harmful), "followed", len(res.Feedback.Followed), "echo", len(res.Feedback.Echo), "fizzle", len(res.Feedback.Fizzle))
	return nil
}

// ErrNoTrace is returned by MineSession for a session with no events in the stream.
var ErrNoTrace = errors.New("no trace events for session")

var errBadSession = errors.New("invalid session id")

// MineSession reads one session's trace and mines it; `skein ingest-traces SESSION` runs it.
// Running it again for the same session changes no counts.
func MineSession(ctx context.Context, d Deps, session string) (*Result, error) {
	d.defaults()
	if err := protocol.IDSession.Check(session); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadSession, err)
	}
	events, err := trace.Read(ctx, d.Conn.JS, d.Names, session)
	if err != nil {
		return nil, fmt.Errorf("mine %s: %w", session, err)
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("mine %s: %w", session, ErrNoTrace)
	}
	s := ParseSession(session, events)
	if s.Agent == "" {
		s.Agent = d.Config.Agent.Name
	}
	readChildren(ctx, d.Conn.JS, d.Names, &s)
	res := &Result{Session: session, Agent: s.Agent, Outcome: s.Outcome}
	c := newCompressor(d, s)
	var lessons []lesson
	for _, ev := range Mine(s) {
		text, err := c.compress(ctx, ev)
		if err != nil {
			return nil, fmt.Errorf("mine %s: %w", session, err)
		}
		res.Candidates = append(res.Candidates, protocol.Candidate{Text: text, Polarity: ev.Polarity, Tools: ev.Tools,
			Key: ev.Key, Source: "miner"})
		if ev.Polarity == protocol.PolarityAvoid {
			lessons = append(lessons, lesson{ev: ev, text: text})
		}
	}
	res.Cases, res.CaseSkips = c.distil(ctx, s)
	for _, why := range res.CaseSkips {
		d.Logger.Debug("no case", "session", session, "episode", why)
	}
	res.Usage = c.usage
	if err := c.flush(ctx); err != nil {
		d.Logger.Warn("miner model_call events", "session", session, "err", err)
	}
	if len(res.Candidates)+len(res.Cases) > 0 {
		var rep protocol.IngestReply
		req := protocol.IngestRequest{Agent: s.MemoryAgent(), SessionID: session, Candidates: res.Candidates, Cases: res.Cases, Scope: s.Scope(), Seen: s.Seen()}
		if err := bus.Request(ctx, d.Conn.NC, d.Names.Memory(protocol.MemIngest), &req, &rep, 30*time.Second); err != nil {
			return nil, fmt.Errorf("mine %s: ingest: %w", session, err)
		}
		res.Actions = rep.Actions
		if err := rep.Err(); err != nil {
			return res, fmt.Errorf("mine %s: ingest: %w", session, err)
		}
	}
	if acts, err := shareCases(ctx, d, s, res.Cases); err != nil {
		d.Logger.Warn("could not share a sub-agent's case with its parent's memory", "session", session, "err", err)
	} else {
		res.Actions = append(res.Actions, acts...)
	}
	if res.ProfilePatches, err = learnProfile(ctx, d, s, lessons); err != nil {
		d.Logger.Warn("no profile patches from this session: the agent's profile ledger cannot be updated", "session", session, "err", err)
	}
	res.Feedback = Feedback(s)
	if fb := res.Feedback; len(fb.Helpful)+len(fb.Harmful)+len(fb.Followed)+len(fb.Echo)+len(fb.Fizzle) > 0 {
		var ack protocol.Ack
		if err := bus.Request(ctx, d.Conn.NC, d.Names.Memory(protocol.MemFeedback), &fb, &ack, 30*time.Second); err != nil {
			return res, fmt.Errorf("mine %s: feedback: %w", session, err)
		}
		if err := ack.Err(); err != nil {
			return res, fmt.Errorf("mine %s: feedback: %w", session, err)
		}
	}
	if err := closeTrace(ctx, d, s, res, c.calls); err != nil {
		d.Logger.Warn("miner: close the session's trace", "session", session, "err", err)
	}
	return res, nil
}

// Replay re-mines every session whose usage event lies in a range of the trace stream: the
// last `since` (when > 0) or from stream sequence fromSeq. It reads with direct gets
// (bus.ReadStream), so it leaves nothing behind and does not disturb the durable miner.
func Replay(ctx context.Context, d Deps, since time.Duration, fromSeq uint64) ([]*Result, error) {
	d.defaults()
	d.model()
	var from bus.ReadFrom
	switch {
	case fromSeq > 0:
		from.Seq = fromSeq
	case since > 0:
		from.Time = time.Now().Add(-since)
	}
	var sessions []string
	seen := map[string]bool{}
	err := bus.ReadStream(ctx, d.Conn.JS, d.Names.Stream(protocol.StreamTrace), d.Names.TraceAll(), from, func(m *jetstream.RawStreamMsg) bool {
		var ev protocol.Event
		if protocol.Unmarshal(m.Data, &ev) != nil || ev.Type != protocol.EvUsage || ev.Role == protocol.RoleMiner {
			return true
		}
		if !seen[ev.SessionID] {
			seen[ev.SessionID] = true
			sessions = append(sessions, ev.SessionID)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	var out []*Result
	for i, s := range sessions {
		r, err := MineSession(ctx, d, s)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if d.Progress != nil {
			d.Progress(i+1, len(sessions), r)
		}
	}
	return out, nil
}

// closeTrace ends the session's trace once mining is done: a mined event with what was learned,
// then a usage event whose totals include the mining calls, so that usage stays the last event of
// the session and counts every role. The same report goes to the usage subject, where `skein
// usage` keeps the last report of each session.
func closeTrace(ctx context.Context, d Deps, s Session, res *Result, calls []ModelCall) error {
	if s.Report == nil {
		return nil // the session has not ended; nothing to amend
	}
	if s.Closed && len(calls) == 0 {
		// Mined before (a replay or re-ingest): counts did not change and no tokens were spent,
		// so the trace and USAGE get nothing twice.
		return nil
	}
	acc := usage.NewAccumulator(nil)
	acc.Merge(*s.Report)
	for _, c := range append(slices.Clone(s.MinerCalls), calls...) {
		acc.Add(c.Model, protocol.RoleMiner, "", c.Usage)
	}
	rep := acc.Report()
	rep.SetTurns(s.Report.TurnCount())
	rep.WallTimeS = s.Report.WallTimeS
	pub := trace.NewPublisher(d.Conn.JS, d.Names, "miner")
	// The feedback marks go with the decisions, so a reader of the trace sees what the session
	// taught memory about the guidelines it was given.
	var marks map[string]string
	for k, ids := range map[string][]string{"helpful": res.Feedback.Helpful, "harmful": res.Feedback.Harmful, "followed": res.Feedback.Followed,
		"echo": res.Feedback.Echo, "fizzle": res.Feedback.Fizzle} {
		if len(ids) > 0 {
			if marks == nil {
				marks = map[string]string{}
			}
			marks[k] = strings.Join(ids, ",")
		}
	}
	if err := pub.Emit(protocol.Event{SessionID: s.ID, Type: protocol.EvMined, Agent: s.Agent, Role: protocol.RoleMiner,
		Mined: res.Candidates, Cases: res.Cases, Ingested: res.Actions, Attrs: marks}); err != nil {
		return err
	}
	usageEv := protocol.Event{SessionID: s.ID, Type: protocol.EvUsage, Agent: s.Agent, Role: protocol.RoleMiner,
		Outcome: s.Outcome, Report: &rep}
	if err := pub.Emit(usageEv); err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pub.Flush(fctx); err != nil {
		return err
	}
	usageEv.Time = time.Now().UTC()
	data, err := protocol.Marshal(&usageEv)
	if err != nil {
		return err
	}
	// The Msg-Id makes a second close within the dedup window (two miners racing on a
	// redelivery) publish the session's mining total once.
	msgID := fmt.Sprintf("%s/miner/%d", s.ID, len(s.MinerCalls)+len(calls))
	if _, err := d.Conn.JS.Publish(ctx, d.Names.Usage(s.Agent), data, jetstream.WithMsgID(msgID)); err != nil {
		return fmt.Errorf("publish usage: %w", err)
	}
	return nil
}
