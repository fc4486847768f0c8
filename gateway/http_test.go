package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func postTask(t *testing.T, srv *httptest.Server, body string) (int, map[string]any) {
	t.Helper()
	resp, err := testClient.Post(srv.URL+"/v1/tasks", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: status %d, body is not JSON: %v", body, resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	return resp.StatusCode, out
}

func TestHTTPSubmit(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)

	status, out := postTask(t, srv, `{"task": "Greet Ada"}`)
	if status != http.StatusAccepted {
		t.Fatalf("status %d %v; want 202", status, out)
	}
	id, _ := out["session_id"].(string)
	if !protocol.IDSession.Valid(id) {
		t.Fatalf("session_id %q", id)
	}
	if s := f.session(t, id); s.Task != "Greet Ada" || s.Agent != testAgent {
		t.Errorf("session %+v", s)
	}

	status, out = postTask(t, srv, `{"task": "Greet Ada", "session_id": "http-1", "agent": "greeter"}`)
	if status != http.StatusAccepted || out["session_id"] != "http-1" {
		t.Fatalf("status %d %v", status, out)
	}
	// The same request again is accepted as a duplicate, not a second session.
	status, out = postTask(t, srv, `{"task": "Greet Ada", "session_id": "http-1"}`)
	if status != http.StatusAccepted || out["duplicate"] != true {
		t.Fatalf("resubmit: status %d %v; want 202 duplicate", status, out)
	}

	rejected := []struct{ body, want string }{
		{`{"task": ""}`, "empty"},
		{`{"task": "hi", "agent": "nobody"}`, "unknown agent"},
		{`{"task": "Greet Bob", "session_id": "http-1"}`, "another task"},
		{`{"task": " \n\u3000 "}`, "empty"},
	}
	for _, c := range rejected {
		status, out := postTask(t, srv, c.body)
		if status != http.StatusUnprocessableEntity {
			t.Errorf("%.60s: status %d; want 422", c.body, status)
		}
		if msg, _ := out["error"].(string); !strings.Contains(msg, c.want) {
			t.Errorf("%.60s: error %q does not mention %q", c.body, msg, c.want)
		}
	}

	// An id the server could not hold in a subject: 400 when malformed, 413 when too long.
	for _, c := range []struct {
		body string
		code protocol.Code
	}{
		{`{"task": "hi", "session_id": "a.b"}`, protocol.CodeBadRequest},
		{`{"task": "hi", "agent": "a b"}`, protocol.CodeBadRequest},
		{`{"task": "hi", "session_id": "` + strings.Repeat("s", 5000) + `"}`, protocol.CodeTooLarge},
		{`{"task": "hi", "agent": "` + strings.Repeat("a", protocol.MaxAgentName+1) + `"}`, protocol.CodeTooLarge},
		{`{"task": "` + strings.Repeat("x", protocol.MaxTaskBytes+1) + `"}`, protocol.CodeTooLarge},
	} {
		status, out := postTask(t, srv, c.body)
		if status != c.code.HTTPStatus() || out["code"] != string(c.code) {
			t.Errorf("%.60s: status %d %v; want %d %s", c.body, status, out, c.code.HTTPStatus(), c.code)
		}
	}

	// What docs/openapi.json's TaskBody refuses, the gateway refuses, saying where.
	malformed := []struct{ body, want string }{
		{`not json`, "malformed request body"},
		{`{"task": "hi", "priority": 9}`, "'priority' not allowed"},
		{`{"TASK": "hi"}`, "'TASK' not allowed"}, // encoding/json alone would take it as task
		{`{"task": 42}`, "at '/task': got number, want string"},
		{`{"task": "hi", "agent": null}`, "at '/agent': got null, want string"},
		{`{"task": "hi", "budget": null}`, "at '/budget'"},
		{`{"task": "hi", "budget": {"max_turns": -1}}`, "at '/budget/max_turns'"},
		{`{"task": "hi", "budget": {"max_turns": 1.5}}`, "at '/budget/max_turns'"},
		{``, "the request body is empty"},
	}
	for _, c := range malformed {
		status, out := postTask(t, srv, c.body)
		if msg, _ := out["error"].(string); status != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%.60q: %d %q; want 400 saying %q", c.body, status, msg, c.want)
		}
	}
	// A number JSON Schema counts as an integer is read as one.
	status, out = postTask(t, srv, `{"task": "Greet Ada", "session_id": "http-whole", "budget": {"max_turns": 3.0, "max_tool_calls": 2e1}}`)
	if status != http.StatusAccepted {
		t.Fatalf("integral numbers in the budget: %d %v", status, out)
	}
	if b := f.session(t, "http-whole").Budget; b.MaxTurns != 3 || b.MaxToolCalls != 20 {
		t.Errorf("budget read as %+v; want max_turns 3, max_tool_calls 20", b)
	}
	status, out = postTask(t, srv, `{"task": "`+strings.Repeat("x", protocol.MaxTaskBytes+8192)+`"}`)
	if msg, _ := out["error"].(string); status != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "at most") {
		t.Errorf("huge body: status %d %v; want 413 naming the limit", status, out)
	}
	if n := f.taskCount(t, testAgent); n != 3 {
		t.Errorf("%d TASKS messages; want 3 (three accepted sessions)", n)
	}
}

func TestHTTPSession(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	if status, out := postTask(t, srv, `{"task": "Greet Ada", "session_id": "get-1"}`); status != http.StatusAccepted {
		t.Fatalf("status %d %v", status, out)
	}
	resp, err := testClient.Get(srv.URL + "/v1/sessions/get-1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s protocol.Session
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || s.SessionID != "get-1" || s.Status != protocol.StatusQueued || s.Task != "Greet Ada" {
		t.Errorf("status %d session %+v", resp.StatusCode, s)
	}

	for path, want := range map[string]int{
		"/v1/sessions/nope":                        http.StatusNotFound,
		"/v1/sessions/nope/events":                 http.StatusNotFound, // not a stream that waits forever
		"/v1/sessions/a.b":                         http.StatusBadRequest,
		"/v1/sessions/a.b/events":                  http.StatusBadRequest,
		"/v1/sessions/" + strings.Repeat("%2A", 3): http.StatusBadRequest,
	} {
		resp, err := testClient.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != want || out["error"] == "" {
			t.Errorf("GET %s: status %d %v; want %d with an error", path, resp.StatusCode, out, want)
		}
	}
}

// The events stream replays the trace from the start and ends by itself after the usage event.
func TestHTTPEventsEndAfterUsage(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	resp := submitAndFollow(t, srv, "sse-1")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}

	// Play the rest of a session the way planner and executor would, after the client connected.
	f.play(t, append(succeeded("sse-1", "Hello, Ada!"), protocol.Event{SessionID: "sse-1", Type: protocol.EvFinal, Text: "after the end"})...)

	// Reading to EOF proves the server closed the stream after usage.
	var types []string
	sse := readSSE(t, resp.Body)
	for event, data, ok := sse.next(); ok; event, data, ok = sse.next() {
		var ev protocol.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("data line is not an event: %v", err)
		}
		if string(ev.Type) != event || ev.SessionID != "sse-1" {
			t.Errorf("event %q carries %+v", event, ev)
		}
		types = append(types, event)
	}
	want := []string{string(protocol.EvSessionStarted), string(protocol.EvFinal), string(protocol.EvUsage)}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Errorf("events %v; want %v", types, want)
	}

}

// The events stream carries the model's text as it is generated (event: delta, a Delta), between
// the trace events, and still ends after the usage event.
func TestHTTPEventsCarryDeltas(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	resp := submitAndFollow(t, srv, "sse-d")
	sse := readSSE(t, resp.Body)
	if ev, _ := sse.event(); ev != string(protocol.EvSessionStarted) {
		t.Fatalf("first event %q", ev)
	}
	// The executor's side: a turn streamed in two batches.
	turn := delta.Start(f.mesh.Conn.NC, f.mesh.Names, "sse-d", "step-1", 1, delta.Options{})
	turn.Text("Hello, ")
	turn.Text("Ada!")
	if err := turn.Close(); err != nil {
		t.Fatal(err)
	}
	var shown delta.Shown
	var got delta.TurnText
	for !got.Done {
		ev, data := sse.event()
		var d protocol.Delta
		if ev != protocol.SSEDelta || json.Unmarshal([]byte(data), &d) != nil || d.V != protocol.SchemaVersion || d.SessionID != "sse-d" {
			t.Fatalf("event %q data %s: want deltas", ev, data)
		}
		got = shown.Add(d)
	}
	if got.Text != "Hello, Ada!" || got.Gap {
		t.Fatalf("streamed %+v", got)
	}
	f.play(t, succeeded("sse-d", "Hello, Ada!")...)
	if ev, _ := sse.event(); ev != string(protocol.EvFinal) {
		t.Fatalf("event %q after the deltas", ev)
	}
	if ev, _ := sse.event(); ev != string(protocol.EvUsage) {
		t.Fatalf("event %q, want usage", ev)
	}
	for sse.sc.Scan() { // the blank line that ends the usage event, then EOF
		if sse.sc.Text() != "" {
			t.Fatalf("more after usage: %q", sse.sc.Text())
		}
	}
}
