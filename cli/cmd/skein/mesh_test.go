package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// A short session: one call of the compiled sum tool, then an answer.
const leakScript = `
rules:
  - when: {last: "^add"}
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
  - reply: {text: "The total is 10."}
`

// leakMesh starts the whole embedded mesh (MiniLM memory and the miner included, since the miner
// reads every session's trace) with the scripted model and the sum tool.
func leakMesh(t *testing.T) (*embeddedMesh, *bus.Conn, protocol.Names) {
	t.Helper()
	root := devtest.RepoRoot(t)
	buildSum(t, root)
	cfg := config.Default()
	useScript(t, cfg, leakScript)
	cfg.Tools.ManifestDirs, cfg.Tools.Enabled = []string{filepath.Join(root, "examples", "tools")}, []string{"sum"}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := upInProcess(ctx, t, cfg, filepath.Join(t.TempDir(), "home"), meshLogger(), "")
	return m, connAs(t, m, auth.Admin), protocol.NewNames(cfg.Mesh.Namespace)
}

// useScript points cfg at the scripted model, with script as its rules.
func useScript(t *testing.T, cfg *config.Config, script string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.Script = "scripted", "scripted", path
}

// upInProcess starts cfg's whole mesh in this process, as `skein up` does, with its home in
// home, logging to log and its HTTP API on httpAddr ("": none), until the test ends.
func upInProcess(ctx context.Context, t *testing.T, cfg *config.Config, home string, log *slog.Logger, httpAddr string) *embeddedMesh {
	t.Helper()
	m, err := startEmbedded(ctx, cfg, nil, home, "127.0.0.1:0", log, httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stop)
	return m
}

// connAs is a connection to m with the credentials of id.
func connAs(t *testing.T, m *embeddedMesh, id auth.Identity) *bus.Conn {
	t.Helper()
	c, err := m.conn(string(id))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// buildSum builds the example sum tool (a Go program) when its binary is missing.
func buildSum(t *testing.T, root string) {
	t.Helper()
	sum := filepath.Join(root, "examples", "tools", "sum", "sum")
	if _, err := os.Stat(sum); err == nil {
		return
	}
	cmd := exec.Command("go", "build", "-o", "sum", ".")
	cmd.Dir, cmd.Env = filepath.Dir(sum), append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sum: %v\n%s", err, out)
	}
}

// runSession submits a task and follows it until the miner's usage event (the session's last),
// returning its id, and an error unless it succeeded.
func runSession(ctx context.Context, c *bus.Conn, names protocol.Names, task string) (string, error) {
	var rep protocol.SubmitReply
	if err := bus.Request(ctx, c.NC, names.Submit(), &protocol.SubmitRequest{Task: task, Caller: "test"}, &rep, 5*time.Second); err != nil {
		return "", err
	}
	if rep.Error != "" {
		return "", fmt.Errorf("submit: %s", rep.Error)
	}
	var outcome protocol.Outcome
	err := trace.Follow(ctx, c.JS, names, rep.SessionID, func(ev protocol.Event) bool {
		if ev.Type.Terminal() {
			outcome = ev.Outcome
		}
		return !(ev.Type == protocol.EvUsage && ev.Role == protocol.RoleMiner)
	})
	if err != nil {
		return rep.SessionID, fmt.Errorf("session %s: %w", rep.SessionID, err)
	}
	if outcome != protocol.OutcomeSuccess {
		return rep.SessionID, fmt.Errorf("session %s ended %q", rep.SessionID, outcome)
	}
	return rep.SessionID, nil
}

// runToMined is runSession for the test's goroutine: it fails t when the session fails.
func runToMined(ctx context.Context, t *testing.T, c *bus.Conn, names protocol.Names, task string) string {
	t.Helper()
	id, err := runSession(ctx, c, names, task)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// consumers counts the consumers of every stream of the mesh.
func consumers(ctx context.Context, t *testing.T, c *bus.Conn, names protocol.Names) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, s := range []string{protocol.StreamTasks, protocol.StreamWork, protocol.StreamResults, protocol.StreamTrace, protocol.StreamUsage, protocol.StreamDLQ} {
		st, err := c.JS.Stream(ctx, names.Stream(s))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[s] = info.State.Consumers
	}
	return out
}

// TestSessionsReleaseWhatTheyUse runs many sessions through one mesh and checks that every
// consumer and goroutine a session creates is gone when it has ended: the mesh once left two
// consumers per session on TRACE and stalled at the stream's consumer limit.
func TestSessionsReleaseWhatTheyUse(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole mesh")
	}
	_, c, names := leakMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// A first session warms everything up (lazy loads, pools), so the baseline is steady state.
	if _, err := runSession(ctx, c, names, "add 2 3 5"); err != nil {
		t.Fatal(err)
	}
	// settle waits for check to hold, and lets the checks after it report when it never does.
	settle := func(check func() bool) {
		_ = poll.Wait(15*time.Second, func() error {
			if check() {
				return nil
			}
			return errors.New("not settled")
		})
	}
	base := consumers(ctx, t, c, names)
	baseG := runtime.NumGoroutine()

	const sessions, parallel = 30, 5
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	sem := make(chan struct{}, parallel)
	for i := 0; i < sessions; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := runSession(ctx, c, names, fmt.Sprintf("add numbers, run %d", i))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var got map[string]int
	settle(func() bool {
		got = consumers(ctx, t, c, names)
		return fmt.Sprint(got) == fmt.Sprint(base)
	})
	if fmt.Sprint(got) != fmt.Sprint(base) {
		t.Errorf("consumers per stream after %d sessions: %v, before: %v", sessions, got, base)
	}
	// A few goroutines come and go with timers and the server's housekeeping; a leak grows with
	// the number of sessions.
	const slack = 15
	var g int
	settle(func() bool { g = runtime.NumGoroutine(); return g <= baseG+slack })
	if g > baseG+slack {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Errorf("goroutines after %d sessions: %d, before: %d\n%s", sessions, g, baseG, buf[:n])
	}
}
