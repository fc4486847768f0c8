// Package gateway is the mesh's front door: it accepts tasks on the submit subject (and over
// HTTP), checks them, records the session as queued and hands it to the planners through TASKS.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Deps are what the gateway needs.
type Deps struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string
	// HTTPAddr, when set, serves the HTTP API there.
	HTTPAddr string
	// HTTPToken is the API's bearer token; empty: HTTPToken(Home, gateway.http_token) when
	// HTTPAddr is set.
	HTTPToken string
	// Mirror receives the trace mirror so a one-shot run can wait for its files.
	Mirror *trace.Mirror
	// Ready, when set, is closed once submit and cancel are served (and the HTTP API listens).
	Ready chan<- struct{}
}

// Run serves until ctx ends.
func Run(ctx context.Context, d Deps) error {
	g, err := New(ctx, d)
	if err != nil {
		return err
	}
	svc, err := micro.AddService(d.Conn.NC, micro.Config{
		Name:        protocol.ServiceGateway,
		Version:     "0.1.0",
		Description: "skein task submission",
		QueueGroup:  protocol.QueueGateway,
	})
	if err != nil {
		return fmt.Errorf("gateway service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	if err := svc.AddEndpoint("submit", micro.HandlerFunc(g.handleSubmit), micro.WithEndpointSubject(d.Names.Submit())); err != nil {
		return fmt.Errorf("gateway submit endpoint: %w", err)
	}
	if err := svc.AddEndpoint("cancel", micro.HandlerFunc(g.handleCancel), micro.WithEndpointSubject(d.Names.Cancel())); err != nil {
		return fmt.Errorf("gateway cancel endpoint: %w", err)
	}
	// Dead letters: work that exhausted its deliveries is kept for operators, not lost.
	stopDLQ, err := bus.StartDLQ(d.Conn, d.Names, d.Logger)
	if err != nil {
		return err
	}
	defer func() { _ = stopDLQ() }()
	errc := make(chan error, 2)
	if d.Home != "" {
		m := d.Mirror
		if m == nil {
			m = &trace.Mirror{}
		}
		m.Conn, m.Names, m.Home, m.Logger = d.Conn, d.Names, d.Home, d.Logger
		if d.Config != nil {
			m.AckWait = d.Config.Mesh.AckWaitOrZero()
		}
		go func() { errc <- m.Run(ctx) }()
	}
	if d.HTTPAddr != "" {
		// Listening before Ready: a gateway reported ready answers on its address.
		ln, err := net.Listen("tcp", d.HTTPAddr)
		if err != nil {
			return fmt.Errorf("gateway http: %w", err)
		}
		go func() { errc <- g.serveListener(ctx, ln) }()
	}
	if d.Ready != nil {
		close(d.Ready)
	}
	d.Logger.Info("gateway ready", "subject", d.Names.Submit(), "http", d.HTTPAddr)
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// Gateway validates and enqueues tasks.
type Gateway struct {
	d        Deps
	sessions *session.Records
	agents   jetstream.KeyValue
	guard    *guard
	patterns []string // the HTTP routes Handler registered
}

// New opens the gateway's buckets.
func New(ctx context.Context, d Deps) (*Gateway, error) {
	sessions, err := session.Open(ctx, d.Conn.JS, d.Names)
	if err != nil {
		return nil, err
	}
	agents, err := bus.KV(ctx, d.Conn.JS, d.Names, protocol.BucketAgents)
	if err != nil {
		return nil, err
	}
	token, maxStreams := d.HTTPToken, 0
	if d.Config != nil {
		maxStreams = d.Config.Gateway.MaxEventStreams
	}
	if token == "" && d.HTTPAddr != "" {
		configured := ""
		if d.Config != nil {
			configured = d.Config.Gateway.HTTPToken
		}
		if token, _, err = HTTPToken(d.Home, configured); err != nil {
			return nil, err
		}
	}
	return &Gateway{d: d, sessions: sessions, agents: agents, guard: newGuard(token, maxStreams)}, nil
}

// handleSubmit serves the submit subject. A refusal is the reply with its error and code, sent
// as a micro service error (bus.Respond).
func (g *Gateway) handleSubmit(req micro.Request) {
	var reply protocol.SubmitReply
	ct, in, err := readRequest[protocol.SubmitRequest](req, "submit")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reply, err = g.Submit(ctx, in)
		cancel()
	}
	if err != nil {
		reply.Fail(coded(err))
	}
	bus.Respond(req, ct, &reply)
}

// readRequest decodes a request to the submit or cancel subject in the encoding its Content-Type
// names, and returns the encoding to answer in: msgpack for a Content-Type neither JSON nor
// msgpack (unsupported_media_type), the request's own for a body it cannot read (bad_request).
func readRequest[T any, PT interface {
	*T
	protocol.Message
}](req micro.Request, what string) (string, T, error) {
	var in T
	ct, err := protocol.ContentType(protocol.HeaderValue(req.Headers(), protocol.HeaderContentType))
	if err != nil {
		return protocol.ContentTypeMsgpack, in, err
	}
	if err := protocol.UnmarshalAs(ct, req.Data(), PT(&in)); err != nil {
		return ct, in, protocol.Errorf(protocol.CodeBadRequest, "malformed %s request: %v", what, err)
	}
	return ct, in, nil
}

// coded is err with its code for the wire (ErrorCode).
func coded(err error) error { return protocol.Wrap(ErrorCode(err), err) }

// ErrRejected wraps every reason a task is refused.
var ErrRejected = errors.New("task rejected")

// errLapsed marks the refusal of an agent whose executors stopped refreshing its registration:
// they may be gone, or unable to write it (a full store).
var errLapsed = errors.New("agent registration lapsed")

// ErrorCode classifies a Submit or Cancel error for the wire: the code of a coded error in its
// chain (a malformed or too long id: bad_request, too_large; no such session: not_found;
// storage_full), else rejected (the task is refused as it is), storage_full (JetStream refused a
// write for want of room: retry once space is freed) or transient (the mesh could not take it
// now).
func ErrorCode(err error) protocol.Code {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return pe.Code
	case errors.Is(err, ErrRejected):
		return protocol.CodeRejected
	case bus.IsStorageFull(err):
		return protocol.CodeStorageFull
	}
	return protocol.CodeTransient
}

// storageFull returns the refusal to answer instead of err when the mesh's storage takes no new
// sessions (or err is JetStream refusing a write for want of room), else nil. After a failed
// write it asks afresh: a write onto a full disk only times out, and the state says why.
func (g *Gateway) storageFull(ctx context.Context, err error) error {
	if bus.IsStorageFull(err) {
		return fmt.Errorf("%w (free space under the mesh's store, or raise mesh.limits, then submit again)", err)
	}
	st := g.d.Conn.Storage(context.WithoutCancel(ctx), g.d.Names, err != nil)
	if st.State.Accepting() {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w (%v)", bus.StorageFullError(st), err)
	}
	return bus.StorageFullError(st)
}

// Submit checks a task, records its session as queued and publishes it. Submitting the same
// session id again is harmless: the session is not duplicated and an unpublished task is
// published once more (the stream deduplicates it).
func (g *Gateway) Submit(ctx context.Context, in protocol.SubmitRequest) (protocol.SubmitReply, error) {
	return g.submit(ctx, in, turnLink{})
}

func (g *Gateway) submit(ctx context.Context, in protocol.SubmitRequest, link turnLink) (protocol.SubmitReply, error) {
	if in.From != "" && link == (turnLink{}) {
		// The turn is read before check has seen the request: its id is checked first.
		if err := protocol.IDSession.Check(in.From); err != nil {
			return protocol.SubmitReply{}, fmt.Errorf("%w: fork: %w", ErrRejected, err)
		}
		if in.Agent == "" {
			// A fork continues with the agent of the turn it forks.
			if src, err := g.readSession(ctx, in.From); err == nil {
				in.Agent = src.Agent
			}
		}
		var err error
		if link, err = g.fork(ctx, &in); err != nil {
			return protocol.SubmitReply{}, err
		}
	}
	// A full store refuses new sessions before anything is written, so a client is told to try
	// again later (503 storage_full) instead of waiting for writes that time out. A lapsed
	// registration is then the executors' heartbeats failing to be written, not a reason to
	// refuse the task as it is.
	if err := g.check(ctx, &in); err != nil {
		if !errors.Is(err, errLapsed) {
			return protocol.SubmitReply{}, err
		}
		if full := g.storageFull(ctx, nil); full != nil {
			return protocol.SubmitReply{}, full
		}
		return protocol.SubmitReply{}, err
	}
	if full := g.storageFull(ctx, nil); full != nil {
		return protocol.SubmitReply{}, full
	}
	rep, err := g.enqueue(ctx, in, link)
	if err != nil && !errors.Is(err, ErrRejected) {
		if full := g.storageFull(ctx, err); full != nil {
			return rep, full
		}
	}
	return rep, err
}

// enqueue records the session, announces it and publishes its task.
func (g *Gateway) enqueue(ctx context.Context, in protocol.SubmitRequest, link turnLink) (protocol.SubmitReply, error) {
	if in.SessionID == "" {
		in.SessionID = NewSessionID()
	}
	now := time.Now().UTC()
	sess := protocol.Session{
		SessionID: in.SessionID, Agent: in.Agent, Task: in.Task, Status: protocol.StatusQueued,
		Parent: in.Parent, Depth: in.Depth, Created: now, Updated: now,
		Conversation: link.conversation, Previous: link.previous, TurnID: in.TurnID,
	}
	if sess.TurnID == "" {
		// A session started without a turn id is still its task's turn: the same task sent
		// under its id again (by a client that derives the id the same way) is a retry.
		sess.TurnID = protocol.DerivedTurnID(in.SessionID, in.Task)
	}
	if link.fork {
		sess.ForkedFrom = link.previous
	}
	if err := g.governNew(ctx, &sess, in); err != nil {
		return protocol.SubmitReply{}, err
	}
	duplicate := false
	if err := g.sessions.Create(ctx, sess); err != nil {
		if !errors.Is(err, session.ErrExists) {
			return protocol.SubmitReply{}, err
		}
		duplicate = true
		prev, err := g.sessions.Get(ctx, in.SessionID)
		if err != nil {
			return protocol.SubmitReply{}, err
		}
		if link.previous == "" && in.Parent == "" && prev.Agent == in.Agent && newMessage(prev, in) {
			// Another message under a session id: a follow-up in that session's conversation.
			return g.continueConversation(ctx, prev, in)
		}
		if prev.Agent != in.Agent || prev.Task != in.Task || (link.previous != "" && prev.Previous != link.previous) ||
			(in.TurnID != "" && prev.TurnID != in.TurnID) {
			switch {
			case link.previous != "" && !link.fork:
				return protocol.SubmitReply{}, errTurnTaken
			case in.TurnID != "" && prev.TurnID == in.TurnID:
				return protocol.SubmitReply{}, fmt.Errorf("%w: turn id %s already names another message of session %s", ErrRejected, in.TurnID, in.SessionID)
			}
			return protocol.SubmitReply{}, fmt.Errorf("%w: session id %s is already used by another task", ErrRejected, in.SessionID)
		}
		if prev.Status != protocol.StatusQueued {
			return protocol.SubmitReply{SessionID: in.SessionID, Duplicate: true}, nil
		}
		sess = prev
	}
	if in.Parent != "" {
		if err := g.linkChild(ctx, in.Parent, in.SessionID); err != nil {
			// The parent was cancelled between the checks: the child must not run.
			if _, cerr := g.Cancel(ctx, protocol.CancelRequest{SessionID: in.SessionID, By: "gateway", Reason: err.Error()}); cerr != nil {
				g.d.Logger.Warn("cancel orphan child", "session", in.SessionID, "err", cerr)
			}
			return protocol.SubmitReply{}, err
		}
	}
	// A resubmit reaches here only while the session is still queued, i.e. when an earlier submit
	// may have stopped between recording the session and enqueueing it. Announcing the session
	// again, under a Msg-Id the stream deduplicates, keeps its trace from missing session_started.
	if err := g.announce(ctx, sess, in); err != nil {
		return protocol.SubmitReply{}, err
	}
	task := protocol.Task{SessionID: in.SessionID, Agent: in.Agent, Task: in.Task, SubmittedAt: sess.Created, Parent: in.Parent, Depth: in.Depth,
		Previous: sess.Previous}
	tdata, err := protocol.Marshal(&task)
	if err != nil {
		return protocol.SubmitReply{}, err
	}
	if _, err := g.d.Conn.JS.Publish(ctx, g.d.Names.Task(in.Agent), tdata, jetstream.WithMsgID(in.SessionID)); err != nil {
		return protocol.SubmitReply{}, fmt.Errorf("enqueue session %s: %w", in.SessionID, err)
	}
	return protocol.SubmitReply{SessionID: in.SessionID, Duplicate: duplicate}, nil
}

func (g *Gateway) announce(ctx context.Context, sess protocol.Session, in protocol.SubmitRequest) error {
	ev := protocol.Event{
		SessionID: sess.SessionID, Type: protocol.EvSessionStarted, Time: sess.Created, Source: "gateway",
		Agent: sess.Agent, Task: sess.Task, Attrs: callerAttrs(sess, in),
	}
	data, err := protocol.Marshal(&ev)
	if err != nil {
		return fmt.Errorf("trace session %s: %w", sess.SessionID, err)
	}
	if _, err := g.d.Conn.JS.Publish(ctx, g.d.Names.Trace(sess.SessionID), data, jetstream.WithMsgID(sess.SessionID+"/started")); err != nil {
		return fmt.Errorf("trace session %s: %w", sess.SessionID, err)
	}
	return nil
}

func callerAttrs(sess protocol.Session, in protocol.SubmitRequest) map[string]string {
	attrs := map[string]string{}
	if in.Caller != "" {
		attrs["caller"] = in.Caller
	}
	if in.Parent != "" {
		attrs["parent"] = in.Parent
	}
	switch {
	case sess.ForkedFrom != "":
		attrs[protocol.AttrForkedFrom] = sess.ForkedFrom
	case sess.Previous != "":
		attrs[protocol.AttrPrevious] = sess.Previous
	}
	if len(attrs) == 0 {
		return nil
	}
	return attrs
}

func (g *Gateway) check(ctx context.Context, in *protocol.SubmitRequest) error {
	in.Task = strings.TrimSpace(in.Task)
	switch {
	case in.Task == "":
		return fmt.Errorf("%w: the task is empty", ErrRejected)
	case len(in.Task) > protocol.MaxTaskBytes:
		return fmt.Errorf("%w: the task is %d bytes; the limit is %d (put large inputs in a file a tool can read)", ErrRejected, len(in.Task), protocol.MaxTaskBytes)
	case !utf8.ValidString(in.Task):
		return fmt.Errorf("%w: the task is not valid UTF-8", ErrRejected)
	}
	if err := in.Budget.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	// Every id becomes part of a subject or key: one too long would cost the gateway its
	// connection, so the ids are checked before anything is read or written with them.
	if err := protocol.CheckIDs(in); err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if in.Agent == "" && g.d.Config != nil {
		in.Agent = g.d.Config.Agent.Name
	}
	if err := protocol.IDAgent.Check(in.Agent); err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	entry, err := g.agents.Get(ctx, in.Agent)
	if err != nil {
		if bus.IsNotFound(err) {
			return fmt.Errorf("%w: unknown agent %q: no executor serves it (start one with `executor --config agent.yaml`)", ErrRejected, in.Agent)
		}
		return fmt.Errorf("look up agent %q: %w", in.Agent, err)
	}
	var spec protocol.AgentSpec
	if err := protocol.Unmarshal(entry.Value(), &spec); err != nil {
		return fmt.Errorf("agent %q: %w", in.Agent, err)
	}
	if spec.Lapsed(time.Now()) {
		return fmt.Errorf("%w: %w: no executor serves agent %q (its registration lapsed %s ago, last from %s); start one with `executor --config agent.yaml`",
			ErrRejected, errLapsed, in.Agent, time.Since(spec.Expires).Round(time.Second), spec.Executor)
	}
	if spec.MaxDepth > 0 && in.Depth > spec.MaxDepth {
		return fmt.Errorf("%w: agent-as-tool chain is %d deep; agent %q allows %d", ErrRejected, in.Depth, in.Agent, spec.MaxDepth)
	}
	return nil
}

// NewSessionID returns a fresh, subject-safe session id.
func NewSessionID() string {
	return "s-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
}

// NewTurnID returns a fresh turn id, for a client to mint before a message's first try.
func NewTurnID() string {
	return "t-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
}
