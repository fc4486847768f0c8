package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// slowFirstTry serves submits on subject with the gateway's own Submit, but answers the first
// request only after the client has given up on it: the task is taken, the reply is late. The
// first reply is held until a second request arrives (the client's retry, so its first try
// timed out) or the test ends. It returns how many requests came, and a channel closed once
// the first try's task is taken.
func slowFirstTry(t *testing.T, f *fixture, subject string) (requests *atomic.Int32, taken <-chan struct{}) {
	t.Helper()
	requests = new(atomic.Int32)
	firstTaken, retried := make(chan struct{}), make(chan struct{})
	sub, err := f.mesh.Conn.NC.Subscribe(subject, func(m *nats.Msg) {
		var in protocol.SubmitRequest
		if err := protocol.Unmarshal(m.Data, &in); err != nil {
			t.Error(err)
			return
		}
		n := requests.Add(1)
		if n == 2 {
			close(retried)
		}
		go func() {
			rep, err := f.gw.Submit(context.Background(), in)
			if err != nil {
				rep.Error = err.Error()
			}
			if n == 1 {
				close(firstTaken)
				select {
				case <-retried:
				case <-t.Context().Done():
				}
			}
			data, _ := protocol.Marshal(&rep)
			_ = m.Respond(data)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return requests, firstTaken
}

func (f *fixture) sessionCount(t *testing.T) int {
	t.Helper()
	n := 0
	if err := f.gw.sessions.Each(testCtx(t), func(protocol.Session) bool { n++; return true }); err != nil {
		return 0
	}
	return n
}

func TestSubmitWhoseFirstTryTimesOutMakesOneSession(t *testing.T) {
	f := newFixture(t)
	const subject = "test.slow.submit"
	requests, _ := slowFirstTry(t, f, subject)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := NewSessionID() // minted by the client before the first try, as `skein run` does
	var rep protocol.SubmitReply
	if err := bus.Request(ctx, f.mesh.Conn.NC, subject, &protocol.SubmitRequest{SessionID: id, Agent: testAgent, Task: "once", Caller: "cli"}, &rep, 500*time.Millisecond); err != nil {
		t.Fatalf("submit with retries: %v", err)
	}
	if rep.Error != "" || rep.SessionID != id {
		t.Fatalf("reply %+v", rep)
	}
	if n := requests.Load(); n < 2 {
		t.Fatalf("%d tries, want a retry (the first one's reply comes too late)", n)
	}
	if n := f.sessionCount(t); n != 1 {
		t.Fatalf("%d sessions after a retried submit, want 1", n)
	}
	if n := f.taskCount(t, testAgent); n != 1 {
		t.Fatalf("%d tasks queued after a retried submit, want 1", n)
	}
}

// Without a client-minted session id a submit is not idempotent: a timed-out first try is not
// sent again, so the mesh never holds two sessions for one request.
func TestSubmitWithoutSessionIDIsNotRetriedAfterATimeout(t *testing.T) {
	f := newFixture(t)
	const subject = "test.slow.submit"
	requests, taken := slowFirstTry(t, f, subject)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rep protocol.SubmitReply
	err := bus.Request(ctx, f.mesh.Conn.NC, subject, &protocol.SubmitRequest{Agent: testAgent, Task: "once", Caller: "cli"}, &rep, 500*time.Millisecond)
	if err == nil {
		t.Fatalf("a timed-out non-idempotent submit returned %+v, want the timeout", rep)
	}
	select {
	case <-taken: // the first try's work has landed
	case <-ctx.Done():
		t.Fatal("the first try's task was never taken")
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d tries of a submit without a session id, want 1", n)
	}
	if n := f.sessionCount(t); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}
