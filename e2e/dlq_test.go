package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestGarbageOnEveryWorkSubjectReachesTheDLQ publishes bytes that are no message on the task,
// work and result subjects of a running mesh: each ends in the DLQ with its origin and a reason,
// none is dropped, and `skein dlq` shows them.
func TestGarbageOnEveryWorkSubjectReachesTheDLQ(t *testing.T) {
	m := newProcMesh(t, writeProject(t, faultAgent, faultScript))
	c := m.c
	m.start(t, "executor", "executor")
	m.start(t, "planner", "planner")
	m.start(t, "gateway", "gateway")
	bustest.WaitAgent(t, c, meshNames, "assistant")
	bustest.WaitPullers(t, c, meshNames, "assistant", 1)

	names := protocol.NewNames("")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	subjects := []string{names.Task("assistant"), names.Work("assistant"), names.Result("garbage-session")}
	for _, s := range subjects {
		if _, err := c.JS.Publish(ctx, s, []byte("\xffnot a message")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for _, dl := range bustest.DeadLetters(t, c, names, 3) {
		got[dl.Header.Get(bus.HeaderDLQSubject)] = dl.Header.Get(bus.HeaderDLQReason)
	}
	for _, s := range subjects {
		if r, ok := got[s]; !ok || !strings.Contains(r, "undecodable") {
			t.Errorf("garbage on %s: dead letter reason %q (present %v)", s, r, ok)
		}
	}
	r := skein(t, t.TempDir(), append(os.Environ(), m.env...), "", "dlq", "--nats", m.url)
	if r.code != 0 {
		t.Fatalf("skein dlq: %s", r)
	}
	out := r.stdout
	for _, s := range subjects {
		if !strings.Contains(out, s) {
			t.Errorf("skein dlq does not show the dead letter from %s:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "reason: undecodable") {
		t.Errorf("skein dlq does not show the reason:\n%s", out)
	}
}
