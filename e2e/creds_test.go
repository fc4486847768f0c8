package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// TestRoleBinariesJoinWithCreds: every role binary joins a mesh with the file --creds names and
// nothing else, as on another machine that was given only its own file: without the flag the
// same start is refused with one line naming --creds; with it a task runs through every role.
func TestRoleBinariesJoinWithCreds(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	url := natsServer(t)
	c := connect(t, url) // the test itself finds admin through $SKEIN_CREDS_DIR
	cfg := writeProject(t, spineAgent, spineScript)

	// Each role's own file, copied away from the mesh's folder; nothing else tells a role where
	// credentials are.
	held := t.TempDir()
	roles := []string{"toolhost", "executor", "planner", "gateway"}
	for _, role := range roles {
		b, err := os.ReadFile(auth.File(os.Getenv("SKEIN_CREDS_DIR"), auth.Identity(role)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(held, role+".nk"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"SKEIN_HOME=" + t.TempDir(), "SKEIN_CREDS_DIR=", "SKEIN_CREDS="}
	args := []string{"--nats", url, "--config", cfg}

	// The control: without --creds this environment holds no credentials.
	refused := start(t, env, "executor-without-creds", "executor", args...)
	select {
	case <-refused.done:
	case <-time.After(time.Minute):
		t.Fatal("an executor without credentials is still running after a minute; want it refused at once")
	}
	if refused.cmd.ProcessState.Success() {
		t.Fatal("an executor without credentials exited 0")
	}
	b, _ := os.ReadFile(refused.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "refused a connection without credentials") || !strings.Contains(last, "--creds FILE") {
		t.Fatalf("an executor without credentials said %q, want the one line naming --creds", b)
	}

	for _, role := range roles {
		start(t, env, role, role, append(args, "--creds", filepath.Join(held, role+".nk"))...)
	}
	bustest.WaitAgent(t, c, meshNames, "assistant")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{Task: "compute the total", SessionID: "creds-flag-1", Caller: "e2e"})
	evs, err := sessiontest.Follow(ctx, c, meshNames, id)
	if err != nil {
		t.Fatal(err)
	}
	checkCompleteTrace(t, id, evs)
	for _, ev := range evs {
		if ev.Type == protocol.EvFinal && (ev.Outcome != protocol.OutcomeSuccess || !strings.Contains(ev.Text, "The total is 10.")) {
			t.Fatalf("final: %s %q", ev.Outcome, ev.Text)
		}
	}
}
