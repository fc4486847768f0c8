package toolhost

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/trace"
)

// callLease is how long a running record holds off repeats without being renewed: the host
// running the call renews it every third of it, so a repeat (the caller asks again after
// protocol.CallSilence without progress) takes over within seconds of that host's death, not
// after the tool's whole time limit.
var callLease = 3 * time.Second

// takeoverConfirm is how long a repeat must see one lapsed running record unchanged before it
// takes the call over. A lapse alone does not prove the host dead: while the bucket's stream
// elects a leader nobody can write, the live host's renewals included, and at the end of the
// election the first write wins. The live host renews again within renewRetry of the stream's
// return, well inside this window, so a repeat does not run a call that is still running.
var takeoverConfirm = 750 * time.Millisecond

// renewRetry is how soon a renewal that failed is tried again.
const renewRetry = 200 * time.Millisecond

// ledger makes tool calls happen once per call id: it records each call's result in the tool
// calls bucket, answers a repeat from the record, and lets a repeat that arrives while the
// first run is in flight wait for that run instead of starting a second one.
type ledger struct {
	kv    jetstream.KeyValue
	js    jetstream.JetStream // the connection kv is on
	host  string
	log   *slog.Logger
	trace *trace.Publisher
	// maxRecord bounds a record so it always fits in a NATS message.
	maxRecord int
	// poll is how often a repeat checks on the run it waits for.
	poll time.Duration
}

// prepared is a call made ready to run (see tools.Runner.Prepare): run starts it, close frees
// what it left (its scratch folder and cgroup) once its reply is out.
type prepared struct {
	run   func() protocol.ToolReply
	close func()
}

// claimed is what claiming a call found: our claim's revision (prev nil), or the record there
// and its revision; lapsed when that record is a run whose lease ran out.
type claimed struct {
	rev    uint64
	prev   *protocol.ToolCallRecord
	lapsed bool
	err    error
}

// once runs the call described by req, unless its id was run before (the recorded reply is
// sent) or is running now (its reply is awaited), and answers through respond. A request
// without a call id runs as it is. A request whose caller's deadline has passed is not started.
//
// The call's place on the caller's path is kept short: it is prepared while its claim is being
// written, and its result is recorded and answered in one go, the record first on the same
// connection, so the server receives the record before the reply; the record's acknowledgement
// and the clean-up come after the reply.
func (l *ledger) once(ctx context.Context, req protocol.ToolRequest, lease time.Duration, prepare func() prepared, respond func(protocol.ToolReply)) {
	if req.DeadlineMS > 0 && time.Now().UnixMilli() >= req.DeadlineMS {
		l.attempt(req, protocol.AttemptExpired, "")
		respond(protocol.ToolReply{Host: l.host, ToolResult: protocol.ToolResult{Kind: protocol.ToolErrTimeout,
			Error: fmt.Sprintf("call %s of %s not started: its caller stopped waiting %s ago", req.CallID, req.Tool,
				time.Since(time.UnixMilli(req.DeadlineMS)).Round(time.Millisecond))}})
		return
	}
	if l == nil || l.kv == nil || req.CallID == "" {
		p := prepare()
		defer p.close()
		respond(p.run())
		return
	}
	hash := protocol.ArgsHash(req.Tool, req.Args)
	first := make(chan claimed, 1)
	go func() { first <- l.claim(ctx, req, hash, lease, 0) }()
	p := prepare()
	defer p.close()
	c := <-first
	// A lapsed record is taken over once it has been seen lapsed, at the same revision, for
	// takeoverConfirm (see there).
	var lapsedRev uint64
	var lapsedSince time.Time
	for {
		if c.err == nil && c.prev != nil && c.lapsed {
			if c.rev != lapsedRev {
				lapsedRev, lapsedSince = c.rev, time.Now()
				l.log.Debug("lease lapsed; taking the call over unless its host renews it", "call", req.CallID,
					"host", c.prev.Host, "within", takeoverConfirm)
			}
			if time.Since(lapsedSince) >= takeoverConfirm {
				l.log.Warn("taking over a call whose host did not renew its lease", "call", req.CallID, "host", c.prev.Host)
				c = l.claim(ctx, req, hash, lease, c.rev)
				continue
			}
		}
		switch {
		case c.err != nil:
			// Without the record the call could run twice; refusing is the safe side, and the
			// caller sees why.
			l.log.Warn("tool call record unavailable; call not started", "call", req.CallID, "err", c.err)
			respond(protocol.ToolReply{Host: l.host, ToolResult: protocol.ToolResult{Kind: protocol.ToolErrUnavailable,
				Error: fmt.Sprintf("toolhost %s cannot record call %s, so it did not start it: %v", l.host, req.CallID, c.err)}})
			return
		case c.prev == nil:
			l.attempt(req, protocol.AttemptRun, "")
			r := &renewal{rev: c.rev}
			stop := l.renew(req, hash, lease, r)
			out := p.run()
			stop()
			rec := l.finish(req, hash, r.rev, out)
			respond(out)
			l.confirm(req, rec)
			return
		case c.prev.State == protocol.CallDone && c.prev.Reply != nil:
			l.attempt(req, protocol.AttemptReplay, c.prev.Host)
			out := *c.prev.Reply
			out.Replayed = true
			respond(out)
			return
		}
		// Running elsewhere (or here, on another goroutine): wait for it, then look again.
		seen := uint64(0)
		if c.lapsed {
			seen = c.rev
		}
		if out, ok := l.await(ctx, req, hash, seen); ok {
			respond(out)
			return
		}
		if ctx.Err() != nil {
			respond(protocol.ToolReply{Host: l.host, ToolResult: protocol.ToolResult{Kind: protocol.ToolErrUnavailable,
				Error: fmt.Sprintf("toolhost %s is shutting down while call %s runs elsewhere; call again", l.host, req.CallID)}})
			return
		}
		c = l.claim(ctx, req, hash, lease, 0)
	}
}

// claim writes a running record for the call unless one exists, and returns what it found (see
// claimed). A record left by a different call that reused the id, or one that cannot be read, is
// taken over at once; a running record whose lease lapsed is taken over only when takeover is its
// revision (the caller has seen it lapsed long enough), else it is returned, lapsed.
func (l *ledger) claim(ctx context.Context, req protocol.ToolRequest, hash string, lease time.Duration, takeover uint64) claimed {
	running := func() ([]byte, error) {
		now := time.Now().UTC()
		rec := protocol.ToolCallRecord{CallID: req.CallID, Tool: req.Tool, ArgsHash: hash, State: protocol.CallRunning,
			Host: l.host, Started: now, LeaseUntil: now.Add(lease)}
		return protocol.Marshal(&rec)
	}
	data, err := running()
	if err != nil {
		return claimed{err: err}
	}
	// A server of the cluster dying leaves the bucket's stream without a leader for a few
	// seconds; the record is written once it has one again, rather than the call refused.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bus.LeaderWait)
	defer cancel()
	var rev uint64
	err = bus.WhileNoLeader(kctx, func() (err error) { rev, err = l.kv.Create(kctx, req.CallID, data); return err })
	if err == nil {
		return claimed{rev: rev}
	}
	if !bus.IsConflict(err) {
		return claimed{err: err}
	}
	// The id has a record: answer with it, or take it over (written again from scratch when it
	// expired meanwhile).
	var found claimed
	err = bus.WhileNoLeader(kctx, func() (err error) {
		rev, err = bus.UpdateKV(kctx, l.kv, req.CallID, func(e jetstream.KeyValueEntry) ([]byte, error) {
			found = claimed{}
			if e == nil {
				return running()
			}
			var prev protocol.ToolCallRecord
			switch err := protocol.Unmarshal(e.Value(), &prev); {
			case err != nil:
				l.log.Warn("unreadable tool call record; running the call again", "call", req.CallID, "err", err)
			case prev.ArgsHash != hash:
				l.log.Warn("call id reused for a different call (the model asked for something else on a redelivered step); running it",
					"call", req.CallID, "tool", req.Tool, "recorded_tool", prev.Tool)
			case prev.State == protocol.CallDone || time.Now().Before(prev.LeaseUntil):
				found = claimed{rev: e.Revision(), prev: &prev}
				return nil, bus.ErrKeep
			case e.Revision() != takeover:
				found = claimed{rev: e.Revision(), prev: &prev, lapsed: true}
				return nil, bus.ErrKeep
			}
			return running()
		})
		return err
	})
	switch {
	case err != nil:
		return claimed{err: err}
	case found.prev != nil:
		return found
	}
	return claimed{rev: rev}
}

// renewal is the revision of a running record, shared by the renewer and finish.
type renewal struct {
	rev uint64
}

// renew keeps a running record's lease fresh until the returned stop is called; stop waits for
// a renewal in progress, so r.rev is final afterwards. Nothing runs until the first renewal is
// due: most calls end well before it, and starting and stopping a renewer would cost each of
// them a wake-up on the way to its reply.
func (l *ledger) renew(req protocol.ToolRequest, hash string, lease time.Duration, r *renewal) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	tick := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		now := time.Now().UTC()
		rec := protocol.ToolCallRecord{CallID: req.CallID, Tool: req.Tool, ArgsHash: hash, State: protocol.CallRunning,
			Host: l.host, Started: now, LeaseUntil: now.Add(lease)}
		data, err := protocol.Marshal(&rec)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), lease/3)
		rev, err := l.kv.Update(ctx, req.CallID, data, r.rev)
		cancel()
		switch {
		case bus.IsConflict(err):
			// Taken over: another host runs the call now, and its record wins (see confirm).
			l.log.Warn("tool call taken over by another host while it ran here", "call", req.CallID)
		case err != nil:
			// No leader, a lost connection: keep trying, so the lease is renewed as soon as the
			// stream answers again, before a repeat has seen it lapsed for takeoverConfirm.
			l.log.Warn("tool call lease not renewed; trying again", "call", req.CallID, "err", err)
			t.Reset(renewRetry)
		default:
			r.rev = rev
			t.Reset(lease / 3)
		}
	}
	mu.Lock()
	t = time.AfterFunc(lease/3, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// record is a call's result record on its way to the bucket.
type record struct {
	data []byte
	rev  uint64 // the revision of the running record it replaces
	ack  jetstream.PubAckFuture
}

// finish sends the record of the reply of a run this host claimed, without waiting for the
// server's acknowledgement (confirm does): the reply goes out right after it on the same
// connection, so the server receives the record before the reply. nil when it cannot be encoded.
func (l *ledger) finish(req protocol.ToolRequest, hash string, rev uint64, out protocol.ToolReply) *record {
	rec := protocol.ToolCallRecord{CallID: req.CallID, Tool: req.Tool, ArgsHash: hash, State: protocol.CallDone,
		Host: l.host, Started: time.Now().UTC(), Reply: &out}
	out.V = protocol.SchemaVersion
	data, err := protocol.Marshal(&rec)
	if err == nil && l.maxRecord > 0 && len(data) > l.maxRecord {
		// Keep that the call ran, not what it said: a repeat must still not run it again.
		short := protocol.ToolReply{Header: out.Header, Host: out.Host, LatencyMS: out.LatencyMS, ToolResult: protocol.ToolResult{
			OK: false, Kind: protocol.ToolErrTooLarge, Truncated: true,
			Error: fmt.Sprintf("call %s already ran (ok=%v) but its %d-byte result was too large to keep for repeats", req.CallID, out.OK, len(data))}}
		rec.Reply = &short
		data, err = protocol.Marshal(&rec)
	}
	if err != nil {
		l.log.Error("encode tool call record", "call", req.CallID, "err", err)
		return nil
	}
	r := &record{data: data, rev: rev}
	// The bucket's subject for the key, as KeyValue.Update writes it; Update itself waits for
	// the acknowledgement, which would put a round trip to the server before the reply.
	msg := &nats.Msg{Subject: protocol.KVKey(l.kv.Bucket(), req.CallID), Data: data}
	r.ack, _ = l.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(rev))
	return r
}

// confirm waits for the record finish sent. One that did not arrive (no stream leader during an
// election, a lost connection) is written again the waiting way, so a repeat of the call still
// finds its result. A refusal means someone took the call over (our lease ran out): their
// record wins.
func (l *ledger) confirm(req protocol.ToolRequest, r *record) {
	if r == nil {
		return
	}
	if r.ack != nil {
		select {
		case <-r.ack.Ok():
			return
		case <-r.ack.Err():
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := bus.WhileNoLeader(ctx, func() error { _, err := l.kv.Update(ctx, req.CallID, r.data, r.rev); return err })
	if bus.IsConflict(err) {
		// Ours may have arrived after all, its acknowledgement lost.
		if e, gerr := l.kv.Get(ctx, req.CallID); gerr == nil && bytes.Equal(e.Value(), r.data) {
			return
		}
	}
	if err != nil {
		l.log.Warn("tool call result not recorded", "call", req.CallID, "err", err)
	}
}

// await polls the record until the run it waits for is done (its reply, true), or is
// abandoned, or the waiter must give up (false: claim again). seen is the revision the caller
// saw lapsed (0: none): while the record stays at it, there is nothing new to wait for.
func (l *ledger) await(ctx context.Context, req protocol.ToolRequest, hash string, seen uint64) (protocol.ToolReply, bool) {
	joined := false
	for {
		select {
		case <-ctx.Done():
			return protocol.ToolReply{}, false
		case <-time.After(l.poll):
		}
		if req.DeadlineMS > 0 && time.Now().UnixMilli() >= req.DeadlineMS {
			return protocol.ToolReply{Host: l.host, ToolResult: protocol.ToolResult{Kind: protocol.ToolErrTimeout,
				Error: fmt.Sprintf("call %s is still running on another toolhost; its caller stopped waiting", req.CallID)}}, true
		}
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := l.kv.Get(kctx, req.CallID)
		cancel()
		if err != nil {
			return protocol.ToolReply{}, false
		}
		var rec protocol.ToolCallRecord
		if protocol.Unmarshal(e.Value(), &rec) != nil || rec.ArgsHash != hash {
			return protocol.ToolReply{}, false
		}
		if rec.State == protocol.CallDone && rec.Reply != nil {
			if !joined {
				l.attempt(req, protocol.AttemptJoin, rec.Host)
			}
			out := *rec.Reply
			out.Replayed = true
			return out, true
		}
		if !time.Now().Before(rec.LeaseUntil) || e.Revision() == seen {
			return protocol.ToolReply{}, false
		}
	}
}

// attempt writes one tool_attempt event to the calling session's trace.
func (l *ledger) attempt(req protocol.ToolRequest, kind, recordedBy string) {
	if l == nil || l.trace == nil || req.SessionID == "" {
		return
	}
	attrs := map[string]string{"attempt": kind, "host": l.host}
	if recordedBy != "" {
		attrs["recorded_by"] = recordedBy
	}
	ev := protocol.Event{Type: protocol.EvToolAttempt, SessionID: req.SessionID, StepID: req.StepID,
		Role: protocol.RoleToolhost, Tool: req.Tool, CallID: req.CallID, Attrs: attrs}
	if err := l.trace.Emit(ev); err != nil {
		l.log.Warn("trace tool attempt", "call", req.CallID, "err", err)
	}
}

// preparer readies one decoded call for the ledger: prepared.run runs it, prepared.close frees
// what it left once its reply is out.
type preparer func(req protocol.ToolRequest, start time.Time) prepared

// callOnce decodes a request, runs it at most once per call id and answers it.
func (h *handler) callOnce(name string, data []byte, start time.Time, prep preparer, respond func(protocol.ToolReply)) {
	var req protocol.ToolRequest
	// The call id becomes a key of the call ledger and the session id a trace subject: both
	// are checked, since one longer than the server accepts would cost the toolhost its connection.
	if err := protocol.UnmarshalChecked(data, &req); err != nil {
		respond(protocol.ToolReply{Host: h.host, LatencyMS: time.Since(start).Milliseconds(), ToolResult: protocol.ToolResult{
			Kind: protocol.ToolErrBadArgs, Code: protocol.CodeOf(err), // bad_request, or too_large for an id over its length
			Error: fmt.Sprintf("malformed tool request for %s: %v", name, err)}})
		return
	}
	h.ledger.once(h.ctx, req, callLease, func() prepared { return prep(req, start) }, respond)
}

// subprocess readies calls of a manifest tool: its process is prepared (arguments, environment,
// scratch folder) while the call's claim is written, and started once it is.
func (h *handler) subprocess(t *tools.Tool) preparer {
	return func(req protocol.ToolRequest, start time.Time) prepared {
		p := h.runner.Prepare(tools.WithCallID(h.ctx, req.CallID), t, req.Args)
		return prepared{
			run: func() protocol.ToolReply {
				res := h.call(t.Name, req, p.Run)
				return protocol.ToolReply{ToolResult: res, LatencyMS: time.Since(start).Milliseconds(), Host: h.host}
			},
			close: p.Close,
		}
	}
}
