package gateway

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// serve puts the gateway's HTTP API on a test server until the test ends.
func (f *fixture) serve(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f.gw.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// serveSubjects runs the gateway's micro endpoint until the test ends and returns once it
// answers: a msgpack submit under session id warm, through the retrying client.
func (f *fixture) serveSubjects(t *testing.T, warm string) {
	t.Helper()
	runGateway(t, f)
	var rep protocol.SubmitReply
	if err := bus.Request(testCtx(t), f.mesh.Conn.NC, f.mesh.Names.Submit(), &protocol.SubmitRequest{Task: "Greet Ada", SessionID: warm}, &rep, 5*time.Second); err != nil || rep.Error != "" {
		t.Fatalf("warm-up submit: %+v %v", rep, err)
	}
}

// requestRaw sends body with header on subject as a client of any language would, without
// the bus's encoding, and returns the reply as it came.
func (f *fixture) requestRaw(t *testing.T, subject string, header nats.Header, body string) *nats.Msg {
	t.Helper()
	msg := nats.NewMsg(subject)
	for k, v := range header {
		msg.Header[k] = v // as given: the case of the name is the caller's
	}
	msg.Data = []byte(body)
	rep, err := f.mesh.Conn.NC.RequestMsgWithContext(testCtx(t), msg)
	if err != nil {
		t.Fatalf("%s %v %q: %v", subject, header, body, err)
	}
	return rep
}

// play publishes events on their sessions' traces the way planner and executor would, and
// returns once the server has them all.
func (f *fixture) play(t *testing.T, events ...protocol.Event) {
	t.Helper()
	for _, ev := range events {
		sessiontest.Publish(t, f.mesh.Conn, f.mesh.Names, ev.SessionID, ev)
	}
}

// succeeded is how a session's trace ends when it succeeds: its final answer, then the usage
// report after which its event stream closes.
func succeeded(session, answer string) []protocol.Event {
	cost := 0.0
	return []protocol.Event{
		{SessionID: session, Type: protocol.EvFinal, Outcome: protocol.OutcomeSuccess, Text: answer},
		{SessionID: session, Type: protocol.EvUsage, Outcome: protocol.OutcomeSuccess, Report: &protocol.UsageReport{CostUSD: &cost}},
	}
}

// sseStream reads a server-sent event stream one event at a time.
type sseStream struct {
	t  *testing.T
	sc *bufio.Scanner
}

func readSSE(t *testing.T, body io.Reader) *sseStream {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &sseStream{t: t, sc: sc}
}

// next reads the next event, its name and its data; ok is false once the server has ended the
// stream, and a stream cut by an error fails the test.
func (s *sseStream) next() (event, data string, ok bool) {
	s.t.Helper()
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			return event, strings.TrimPrefix(line, "data: "), true
		}
	}
	if err := s.sc.Err(); err != nil {
		s.t.Fatalf("reading the event stream: %v", err)
	}
	return "", "", false
}

// event is next where the stream must go on.
func (s *sseStream) event() (event, data string) {
	s.t.Helper()
	event, data, ok := s.next()
	if !ok {
		s.t.Fatal("the event stream ended")
	}
	return event, data
}

// submitAndFollow submits a task under session over HTTP and opens the session's event stream,
// until the test ends.
func submitAndFollow(t *testing.T, srv *httptest.Server, session string) *http.Response {
	t.Helper()
	if status, out := postTask(t, srv, `{"task": "Greet Ada", "session_id": "`+session+`"}`); status != http.StatusAccepted {
		t.Fatalf("submit %s: status %d %v", session, status, out)
	}
	resp, err := testClient.Get(srv.URL + "/v1/sessions/" + session + "/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
