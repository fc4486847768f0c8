package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A mesh without a planner: a submitted session stays queued, so a cancel never ends it and
// `skein run` would wait after the first Ctrl-C; the second Ctrl-C leaves at once with exit 130.
func TestRunSecondCtrlCLeavesAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	cfg := writeProject(t, `
agent:
  name: idler
llm:
  provider: scripted
  script: script.yaml
memory:
  enabled: false
`, "rules:\n  - reply: {text: never asked}\n")
	url := natsServer(t)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + t.TempDir()}
	start(t, env, "executor", "executor", "--nats", url, "--config", cfg)
	start(t, env, "gateway", "gateway", "--nats", url, "--config", cfg)
	bustest.WaitAgent(t, c, meshNames, "idler")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "skein"), "run", "--nats", url, "--config", cfg, "--session-id", "idle-1", "wait for nobody")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	done := make(chan error, 1)
	await := func(want string) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("skein run ended before printing %q", want)
				}
				if strings.Contains(l, want) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("skein run never printed %q", want)
			}
		}
	}
	kv, err := bus.KV(ctx, c.JS, protocol.NewNames(""), protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, time.Minute, "the session to be submitted", func() bool {
		_, err := kv.Get(ctx, "idle-1")
		return err == nil
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	await("cancelling session")
	go func() { done <- cmd.Wait() }()
	// The cancel cannot end a session no planner holds: the first Ctrl-C leaves run waiting.
	poll.Quiet(t, time.Second, "skein run waiting after the first Ctrl-C", func() error {
		select {
		case err := <-done:
			return fmt.Errorf("it left: %v", err)
		default:
			return nil
		}
	})
	began := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Fatalf("skein run after the second Ctrl-C: %v; want exit 130", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("skein run did not leave after the second Ctrl-C")
	}
	t.Logf("left %s after the second Ctrl-C", time.Since(began))
}
