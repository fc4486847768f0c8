package executor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/llm/scripted"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// quiet drops service logs unless the test runs with -v and fails; tests assert on traces.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func testdata(t testing.TB, parts ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"testdata"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mesh is a real embedded NATS with a real toolhost serving the given tools.
type mesh struct {
	*bustest.Mesh
}

// startMesh starts NATS and a toolhost for the tools of dir named in enabled.
func startMesh(t *testing.T, dir string, enabled ...string) *mesh {
	t.Helper()
	return startMeshDirs(t, []string{dir}, enabled...)
}

// startMeshDirs starts NATS and a toolhost for the tools of several folders.
func startMeshDirs(t *testing.T, dirs []string, enabled ...string) *mesh {
	t.Helper()
	devtest.NeedProgram(t, "python3")
	m := bustest.Start(t)
	startToolhost(t, m, "test-host", map[string]any{"manifest_dirs": dirs, "enabled": enabled})
	return &mesh{Mesh: m}
}

// startToolhost runs a toolhost, the binary as it is deployed (built once per test run: this
// module depends on pkg only), with tools as its config's tools section, until the test ends.
// It returns once the toolhost has published its tools and answers them.
func startToolhost(t *testing.T, m *bustest.Mesh, hostID string, tools map[string]any) {
	t.Helper()
	bin := devtest.Build(t, "toolhost/cmd/toolhost")
	dir := t.TempDir()
	cfg, err := yaml.Marshal(map[string]any{"tools": tools})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, logPath := filepath.Join(dir, "agent.yaml"), filepath.Join(dir, "toolhost.log")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--nats", m.URL, "--config", cfgPath, "--host-id", hostID)
	cmd.Env = append(os.Environ(), "SKEIN_HOME="+dir) // no credentials: the test server has none
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start toolhost: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	log := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second): // its shutdown grace is 10 s
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("toolhost %s:\n%s", hostID, log())
		}
	})
	poll.Eventually(t, time.Minute, "toolhost "+hostID+" to serve", func() error {
		select {
		case <-exited:
			t.Fatalf("toolhost %s exited: %v\n%s", hostID, cmd.ProcessState, log())
		default:
		}
		if !strings.Contains(log(), `msg="toolhost ready"`) {
			return errors.New("no ready line in its log yet")
		}
		return nil
	})
}

// testConfig is the executor's configuration for the test tools: no memoryd, no miner.
func testConfig(dir string, enabled ...string) *config.Config {
	cfg := config.Default()
	cfg.Agent.Name = "tester"
	cfg.Tools.ManifestDirs = []string{dir}
	cfg.Tools.Enabled = enabled
	cfg.Memory.Enabled = false
	cfg.Miner.Enabled = false
	return cfg
}

func (m *mesh) executor(t *testing.T, cfg *config.Config, backend llm.Backend) *Executor {
	t.Helper()
	return newExecutor(t, m.Mesh, cfg, backend, quiet())
}

// newExecutor makes an executor on m for cfg that asks backend (nil: the one cfg names) and
// logs to log.
func newExecutor(t testing.TB, m *bustest.Mesh, cfg *config.Config, backend llm.Backend, log *slog.Logger) *Executor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x, err := New(ctx, Deps{Conn: m.Connect(t, "executor"), Names: m.Names, Config: cfg, Logger: log,
		ID: "executor-under-test", Backend: backend, Home: t.TempDir()})
	if err != nil {
		t.Fatalf("executor: %v", err)
	}
	return x
}

// step is a one-step session for the test's agent.
func step(t *testing.T, cfg *config.Config, task string) protocol.Step {
	return protocol.Step{SessionID: "s-" + sanitize(t.Name()), StepID: "step-1", Agent: cfg.Agent.Name, Task: task}
}

func sanitize(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			out[i] = '-'
		}
	}
	return string(out)
}

// runStep runs one step and returns its result and its stored trace.
func (m *mesh) runStep(t *testing.T, x *Executor, st protocol.Step) (protocol.StepResult, []protocol.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res := x.RunStep(ctx, st)
	if err := x.trace.Flush(ctx); err != nil {
		t.Fatalf("flush trace: %v", err)
	}
	evs, err := trace.Read(ctx, m.Conn.JS, m.Names, st.SessionID)
	if err != nil {
		t.Fatalf("read trace: %v", err)
	}
	return res, evs
}

// scriptBackend parses a scripted-model rule file given inline.
func scriptBackend(t testing.TB, yaml string) llm.Backend {
	t.Helper()
	s, err := scripted.Parse(t.Name()+".yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("script: %v", err)
	}
	return scripted.FromScript(s)
}

// recorder keeps every request a backend receives, so a test can check what the model saw.
type recorder struct {
	llm.Backend
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recorder) Complete(ctx context.Context, req llm.Request) (*llm.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Backend.Complete(ctx, req)
}

func (r *recorder) requests() []llm.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]llm.Request(nil), r.reqs...)
}

// lastResults returns the tool results of the newest user message of req.
func lastResults(req llm.Request) []*llm.ToolResult {
	var out []*llm.ToolResult
	if len(req.Messages) == 0 {
		return nil
	}
	for _, b := range req.Messages[len(req.Messages)-1].Content {
		if b.Type == llm.BlockToolResult {
			out = append(out, b.ToolResult)
		}
	}
	return out
}

// toolUses returns the calls of the newest assistant message of req.
func toolUses(req llm.Request) []*llm.ToolCall {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != llm.RoleAssistant {
			continue
		}
		var out []*llm.ToolCall
		for _, b := range req.Messages[i].Content {
			if b.Type == llm.BlockToolUse {
				out = append(out, b.ToolUse)
			}
		}
		return out
	}
	return nil
}
