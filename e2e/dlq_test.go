package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestGarbageOnEveryWorkSubjectReachesTheDLQ publishes bytes that are no message on the task,
// work and result subjects of a running mesh: each ends in the DLQ with its origin and a reason,
// none is dropped, and `skein dlq` shows them.
func TestGarbageOnEveryWorkSubjectReachesTheDLQ(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	url := natsServer(t)
	cfg := writeProject(t, strings.ReplaceAll(faultAgent, "$FAULT_TOOLS", filepath.Join(devtest.RepoRoot(t), "e2e", "testdata", "tools")), faultScript)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + t.TempDir()}
	args := []string{"--nats", url, "--config", cfg}
	start(t, env, "executor", "executor", args...)
	start(t, env, "planner", "planner", args...)
	start(t, env, "gateway", "gateway", args...)
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
	dlq, err := c.JS.Stream(ctx, names.Stream(protocol.StreamDLQ))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	poll.True(t, time.Minute, "three dead letters", func() bool {
		info, err := dlq.Info(ctx)
		if err != nil || info.State.Msgs < 3 {
			return false
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			if m, err := dlq.GetMsg(ctx, seq); err == nil {
				got[m.Header.Get(bus.HeaderDLQSubject)] = m.Header.Get(bus.HeaderDLQReason)
			}
		}
		return len(got) >= 3
	})
	for _, s := range subjects {
		if r, ok := got[s]; !ok || !strings.Contains(r, "undecodable") {
			t.Errorf("garbage on %s: dead letter reason %q (present %v)", s, r, ok)
		}
	}
	r := skein(t, t.TempDir(), append(os.Environ(), env...), "", "dlq", "--nats", url)
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
