package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// fixture is a gateway on a real embedded NATS server with one agent registered in the agents KV,
// as an executor would register it, so no executor has to run.
type fixture struct {
	mesh *bustest.Mesh
	gw   *Gateway
	deps Deps
}

const testAgent = "greeter"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	m := bustest.Start(t)
	cfg := config.Default()
	cfg.Agent.Name = testAgent
	d := Deps{Conn: m.Conn, Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler), HTTPToken: testToken}
	ctx := testCtx(t)
	gw, err := New(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	bustest.RegisterAgent(t, m.Conn, m.Names, protocol.AgentSpec{Name: testAgent, MaxSteps: 5, MaxDepth: 2})
	return &fixture{mesh: m, gw: gw, deps: d}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// taskCount is how many TASKS messages are stored for an agent.
func (f *fixture) taskCount(t *testing.T, agent string) uint64 {
	t.Helper()
	ctx := testCtx(t)
	s, err := f.mesh.Conn.JS.Stream(ctx, f.mesh.Names.Stream(protocol.StreamTasks))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(f.mesh.Names.Task(agent)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[f.mesh.Names.Task(agent)]
}

func (f *fixture) session(t *testing.T, id string) protocol.Session {
	t.Helper()
	ctx := testCtx(t)
	s, err := f.gw.sessions.Get(ctx, id)
	if err != nil {
		t.Fatalf("session %s: %v", id, err)
	}
	return s
}

func TestSubmitRejectsBadTasksClearly(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name string
		in   protocol.SubmitRequest
		want []string
	}{
		{"empty task", protocol.SubmitRequest{Task: ""}, []string{"task is empty"}},
		{"blank task", protocol.SubmitRequest{Task: " \n\t "}, []string{"task is empty"}},
		{"oversized task", protocol.SubmitRequest{Task: strings.Repeat("x", protocol.MaxTaskBytes+1)}, []string{"bytes", "limit", "file"}},
		{"invalid utf-8", protocol.SubmitRequest{Task: "greet \xff\xfe Ada"}, []string{"UTF-8"}},
		{"session id with a dot", protocol.SubmitRequest{Task: "hi", SessionID: "a.b"}, []string{"session id"}},
		{"session id with a wildcard", protocol.SubmitRequest{Task: "hi", SessionID: "a*"}, []string{"session id"}},
		{"session id too long", protocol.SubmitRequest{Task: "hi", SessionID: strings.Repeat("s", 129)}, []string{"session id", "128"}},
		{"unknown agent", protocol.SubmitRequest{Task: "hi", Agent: "nobody"}, []string{`"nobody"`, "executor --config"}},
		{"bad agent name", protocol.SubmitRequest{Task: "hi", Agent: "a b"}, []string{"agent"}},
		{"too deep", protocol.SubmitRequest{Task: "hi", Agent: testAgent, Depth: 3, Parent: "s-parent"}, []string{"3 deep", "allows 2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := f.gw.Submit(testCtx(t), c.in)
			if err == nil {
				t.Fatalf("accepted (session %s); want a rejection", rep.SessionID)
			}
			if !errors.Is(err, ErrRejected) {
				t.Errorf("error %q does not wrap ErrRejected", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if n := f.taskCount(t, testAgent); n != 0 {
		t.Errorf("%d tasks published for rejected submissions", n)
	}
}

func TestSubmitAcceptsTaskAtTheLimitAndWithinDepth(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: strings.Repeat("x", protocol.MaxTaskBytes)}); err != nil {
		t.Fatalf("task of exactly MaxTaskBytes: %v", err)
	}
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "sub", Depth: 2, Parent: "s-p"}); err != nil {
		t.Fatalf("depth equal to max_depth: %v", err)
	}
}

func TestSubmitRecordsSessionTraceAndTask(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "  Greet Ada  ", Caller: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !protocol.IDSession.Valid(rep.SessionID) || rep.Duplicate {
		t.Fatalf("reply %+v", rep)
	}
	s := f.session(t, rep.SessionID)
	if s.Status != protocol.StatusQueued || s.Agent != testAgent || s.Task != "Greet Ada" {
		t.Errorf("session %+v; want queued, agent from config, task trimmed", s)
	}
	events, err := trace.Read(ctx, f.mesh.Conn.JS, f.mesh.Names, rep.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Type != protocol.EvSessionStarted || events[0].Task != "Greet Ada" || events[0].Attrs["caller"] != "test" {
		t.Errorf("trace %+v; want one session_started event with the task and caller", events)
	}
	if n := f.taskCount(t, testAgent); n != 1 {
		t.Errorf("%d TASKS messages; want 1", n)
	}
}

func TestDuplicateSubmitIsIdempotent(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	in := protocol.SubmitRequest{Task: "Greet Ada", SessionID: "dup-1"}
	first, err := f.gw.Submit(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if first.SessionID != "dup-1" || first.Duplicate {
		t.Fatalf("first reply %+v", first)
	}
	created := f.session(t, "dup-1").Created
	for range 3 {
		again, err := f.gw.Submit(ctx, in)
		if err != nil {
			t.Fatalf("resubmit: %v", err)
		}
		if again.SessionID != "dup-1" || !again.Duplicate {
			t.Fatalf("resubmit reply %+v; want the same session marked duplicate", again)
		}
	}
	if n := f.taskCount(t, testAgent); n != 1 {
		t.Errorf("%d TASKS messages after 4 submits of one session; want 1", n)
	}
	if got := f.session(t, "dup-1").Created; !got.Equal(created) {
		t.Errorf("session rewritten: created %v, then %v", created, got)
	}
	events, err := trace.Read(ctx, f.mesh.Conn.JS, f.mesh.Names, "dup-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 {
		t.Errorf("%d trace events; want one session_started", len(events))
	}

	// A session that has moved on is not enqueued again.
	if _, _, err := f.gw.sessions.Update(ctx, "dup-1", func(s *protocol.Session) (bool, error) {
		s.Status = protocol.StatusRunning
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	again, err := f.gw.Submit(ctx, in)
	if err != nil || !again.Duplicate {
		t.Fatalf("resubmit of a running session: %+v, %v", again, err)
	}
	if n := f.taskCount(t, testAgent); n != 1 {
		t.Errorf("%d TASKS messages after resubmitting a running session; want 1", n)
	}
}

func TestSameSessionIDWithAnotherTaskIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "Greet Ada", SessionID: "taken"}); err != nil {
		t.Fatal(err)
	}
	_, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "Greet Bob", SessionID: "taken"})
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "taken") || !strings.Contains(err.Error(), "another task") {
		t.Fatalf("err = %v; want a rejection naming the session id", err)
	}
	if s := f.session(t, "taken"); s.Task != "Greet Ada" {
		t.Errorf("session task overwritten: %q", s.Task)
	}
	if n := f.taskCount(t, testAgent); n != 1 {
		t.Errorf("%d TASKS messages; want 1", n)
	}
}

// runGateway serves the gateway's micro endpoint until the test ends.
func runGateway(t *testing.T, f *fixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, f.deps) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway Run: %v", err)
		}
	})
}

func TestSubmitEndpoint(t *testing.T) {
	f := newFixture(t)
	runGateway(t, f)
	ctx := testCtx(t)
	nc := f.mesh.Conn.NC

	var rep protocol.SubmitReply
	if err := bus.Request(ctx, nc, f.mesh.Names.Submit(), &protocol.SubmitRequest{Task: "Greet Ada", SessionID: "ep-1"}, &rep, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rep.Error != "" || rep.SessionID != "ep-1" {
		t.Fatalf("reply %+v", rep)
	}

	rep = protocol.SubmitReply{}
	if err := bus.Request(ctx, nc, f.mesh.Names.Submit(), &protocol.SubmitRequest{Task: ""}, &rep, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Error, "task is empty") {
		t.Errorf("empty task reply %+v; want the reason in Error", rep)
	}

	// Bytes that are not a submit request get an error reply, and the gateway keeps serving.
	for _, garbage := range [][]byte{[]byte("not msgpack at all"), {}, {0xc1}, {0x81, 0xa1}} {
		msg, err := nc.RequestWithContext(ctx, f.mesh.Names.Submit(), garbage)
		if err != nil {
			t.Fatalf("garbage %q: %v", garbage, err)
		}
		var r protocol.SubmitReply
		if err := protocol.Unmarshal(msg.Data, &r); err != nil {
			t.Fatalf("garbage %q: reply is not a SubmitReply: %v (%q)", garbage, err, msg.Data)
		}
		if !strings.Contains(r.Error, "malformed submit request") {
			t.Errorf("garbage %q: reply %+v", garbage, r)
		}
	}
	rep = protocol.SubmitReply{}
	if err := bus.Request(ctx, nc, f.mesh.Names.Submit(), &protocol.SubmitRequest{Task: "Greet Bob"}, &rep, 5*time.Second); err != nil || rep.Error != "" {
		t.Fatalf("after garbage: %+v, %v", rep, err)
	}
}

// A submit that stopped after recording its session (before its trace and task went out) is
// completed by the client's retry: one session_started, one task.
func TestResubmitCompletesAnInterruptedSubmit(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	now := time.Now().UTC()
	s := protocol.Session{SessionID: "cut-1", Agent: testAgent, Task: "Greet Ada", Status: protocol.StatusQueued, Created: now, Updated: now}
	if err := f.gw.sessions.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rep, err := f.gw.Submit(ctx, protocol.SubmitRequest{Task: "Greet Ada", SessionID: "cut-1"})
		if err != nil || !rep.Duplicate {
			t.Fatalf("retry: %+v, %v", rep, err)
		}
	}
	events, err := trace.Read(ctx, f.mesh.Conn.JS, f.mesh.Names, "cut-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Type != protocol.EvSessionStarted || events[0].Task != "Greet Ada" {
		t.Errorf("trace %+v; want exactly one session_started", events)
	}
	if n := f.taskCount(t, testAgent); n != 1 {
		t.Errorf("%d TASKS messages; want 1", n)
	}
}

// An agent whose executors stopped heartbeating its registration is refused, not queued.
func TestSubmitRefusesAnAgentNobodyServes(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	bustest.RegisterAgent(t, f.mesh.Conn, f.mesh.Names, protocol.AgentSpec{Name: "ghost", MaxSteps: 5, Executor: "executor@gone/1",
		Expires: time.Now().Add(-time.Minute)})
	_, err := f.gw.Submit(ctx, protocol.SubmitRequest{Agent: "ghost", Task: "anyone there?"})
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "no executor serves agent \"ghost\"") {
		t.Fatalf("submit to a lapsed agent: %v, want a rejection naming it", err)
	}
	if n := f.taskCount(t, "ghost"); n != 0 {
		t.Fatalf("%d tasks queued for an agent nobody serves", n)
	}
	bustest.RegisterAgent(t, f.mesh.Conn, f.mesh.Names, protocol.AgentSpec{Name: "ghost", MaxSteps: 5, Expires: time.Now().Add(time.Minute)})
	if _, err := f.gw.Submit(ctx, protocol.SubmitRequest{Agent: "ghost", Task: "anyone there?"}); err != nil {
		t.Fatalf("submit to a live agent: %v", err)
	}
}
