package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A task the mesh cannot take now because TASKS is full (mesh.limits.tasks.max_msgs reached: a
// full work queue refuses new messages, with JetStream's storage error code) is storage_full:
// HTTP answers 503 with code "storage_full", the submit endpoint answers code storage_full (the
// CLI's exit 75), and neither says the task is refused.
func TestFullTaskQueueIsStorageFull(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	s, err := f.mesh.Conn.JS.Stream(ctx, f.mesh.Names.Stream(protocol.StreamTasks))
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	sc.MaxMsgs = 1
	if _, err := f.mesh.Conn.JS.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	srv := f.serve(t)
	if status, out := postTask(t, srv, `{"task": "first", "session_id": "full-1"}`); status != http.StatusAccepted {
		t.Fatalf("first task: status %d %v, want 202", status, out)
	}
	status, out := postTask(t, srv, `{"task": "second", "session_id": "full-2"}`)
	if status != http.StatusServiceUnavailable || out["code"] != string(protocol.CodeStorageFull) {
		t.Fatalf("task into a full queue: status %d %v, want 503 with code %q", status, out, protocol.CodeStorageFull)
	}
	if msg, _ := out["error"].(string); !strings.Contains(msg, "full-2") {
		t.Errorf("error %q does not name the session", msg)
	}

	runGateway(t, f)
	var rep protocol.SubmitReply
	if err := bus.Request(ctx, f.mesh.Conn.NC, f.mesh.Names.Submit(), &protocol.SubmitRequest{SessionID: "full-3", Agent: testAgent, Task: "third", Caller: "cli"}, &rep, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rep.Error == "" || rep.Code != protocol.CodeStorageFull || !rep.Code.Retryable() {
		t.Fatalf("submit into a full queue: reply %+v, want code %q", rep, protocol.CodeStorageFull)
	}
}
