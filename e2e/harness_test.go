package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// programs are what binaries builds: every role, the CLI and the tools' trampoline.
var programs = []string{"gateway/cmd/gateway", "planner/cmd/planner", "executor/cmd/executor", "toolhost/cmd/toolhost",
	"memoryd/cmd/memoryd", "miner/cmd/miner", "cli/cmd/skein", "pkg/tools/cmd/skein-tool-sandbox"}

var (
	sumOnce sync.Once
	sumErr  error
)

// binaries builds every role and the CLI once per test process and returns their folder.
func binaries(t testing.TB) string {
	t.Helper()
	var dir string
	for _, p := range programs {
		dir = filepath.Dir(devtest.Build(t, p))
	}
	// The Go example tool is normally built by the Makefile; build it here when it is missing.
	sumOnce.Do(func() {
		sum := filepath.Join(devtest.RepoRoot(t), "examples", "tools", "sum", "sum")
		if _, err := os.Stat(sum); err != nil {
			cmd := exec.Command("go", "build", "-o", "sum", ".")
			cmd.Dir = filepath.Dir(sum)
			cmd.Env = append(os.Environ(), "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				sumErr = fmt.Errorf("build sum tool: %v\n%s", err, out)
			}
		}
	})
	if sumErr != nil {
		t.Fatal(sumErr)
	}
	return dir
}

// proc is a role running as its own OS process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs bin (a binary the tests built, or an absolute path) with args; its output goes to a
// log file printed when the test fails.
func start(t *testing.T, env []string, name, bin string, args ...string) *proc {
	t.Helper()
	return startIn(t, "", env, name, bin, args...)
}

// startIn is start in the working folder dir ("" is the test's).
func startIn(t *testing.T, dir string, env []string, name, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(binaries(t), bin)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		// Authentication is on: a role that needs something its identity may not do is a gap
		// in the permission matrix, even when the test passes around it.
		if b, err := os.ReadFile(logPath); err == nil && strings.Contains(string(b), "NATS refused an operation") {
			t.Errorf("%s hit a permission the matrix does not give it (pkg/auth)", name)
		}
		if t.Failed() {
			dumpLog(t, p)
		}
	})
	return p
}

// stop asks the process to shut down and kills it if it does not.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	// the duration is the point: the grace a role has to shut down on SIGTERM before the kill.
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process at once, as a crash would.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func dumpLog(t *testing.T, p *proc) {
	f, err := os.Open(p.log)
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	t.Logf("--- last lines of %s ---\n%s", p.name, strings.Join(lines, "\n"))
}

// natsServer starts a real NATS server in the test process, with authentication on as in
// production, and returns its URL. Role processes find their credentials through
// $SKEIN_CREDS_DIR, which the test's environment (inherited by start) names.
func natsServer(t *testing.T) string {
	t.Helper()
	creds := t.TempDir()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", CredsDir: creds, Names: protocol.NewNames("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	t.Setenv("SKEIN_CREDS_DIR", creds)
	return srv.URL()
}

// connect connects the test itself as admin (it provisions and inspects consumers).
func connect(t *testing.T, url string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, url, "e2e", 15*time.Second, bus.WithCreds(auth.Resolve(auth.Admin, auth.Source{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := bus.Provision(ctx, c.JS, protocol.NewNames(""), bus.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	return c
}

// meshNames are the names every e2e mesh runs under: the default, no prefix.
var meshNames = protocol.NewNames("")

// procMesh is a NATS server (natsServer) the test runs role processes on, all with one
// project's config and one environment, and the test's own admin connection to it.
type procMesh struct {
	url  string
	c    *bus.Conn
	env  []string // SKEIN_HOME, a temp folder, and what newProcMesh was given
	args []string // --nats url --config cfg
}

// newProcMesh skips the test in -short mode (it runs processes), starts the server and
// connects to it; cfg is the project every role reads.
func newProcMesh(t *testing.T, cfg string, env ...string) *procMesh {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test")
	}
	url := natsServer(t)
	return &procMesh{url: url, c: connect(t, url), env: append([]string{"SKEIN_HOME=" + t.TempDir()}, env...),
		args: []string{"--nats", url, "--config", cfg}}
}

// start runs a role's binary (bin) as the process name.
func (m *procMesh) start(t *testing.T, name, bin string) *proc {
	t.Helper()
	return start(t, m.env, name, bin, m.args...)
}

// assistantAgent begins an agent.yaml: agent assistant, at most four steps, on the scripted
// model playing script.yaml (writeProject writes both). A test adds its tools and the rest.
const assistantAgent = `
agent:
  name: assistant
  max_steps: 4
llm:
  provider: scripted
  model: scripted
  script: script.yaml
`

// writeProject writes agent.yaml and script.yaml into a temp folder and returns the config path.
// In agent.yaml, $TOOLS names the example tools and $TESTTOOLS e2e's test tools.
func writeProject(t *testing.T, agentYAML, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "script.yaml"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	root := devtest.RepoRoot(t)
	body := strings.NewReplacer("$TOOLS", filepath.Join(root, "examples", "tools"),
		"$TESTTOOLS", filepath.Join(root, "e2e", "testdata", "tools")).Replace(agentYAML)
	p := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// effectLog is the side-effect log the effect tool appends to: made here, writable by all,
// since each call runs as a uid of its own when the tests run as root.
func effectLog(t *testing.T) string {
	t.Helper()
	p := filepath.Join(devtest.SharedDir(t), "effects.jsonl")
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return p
}

// needMiniLM skips the test when .tools holds no all-MiniLM-L6-v2 embedder (make setup).
func needMiniLM(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(devenv.ToolsDir(), "memory", "minilm")); err != nil {
		devtest.Missing(t, "the all-MiniLM-L6-v2 embedder")
	}
}

// waitMemoryd waits until memoryd answers its health check.
func waitMemoryd(t *testing.T, c *bus.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rep protocol.MemoryHealthReply
	if err := bus.Request(ctx, c.NC, protocol.NewNames("").Memory(protocol.MemHealth), &protocol.MemoryHealthRequest{}, &rep, 5*time.Second); err != nil || !rep.OK {
		t.Fatalf("memoryd not healthy: %v %+v", err, rep)
	}
}

// reachableTempDir is t.TempDir() opened for other users to enter: a scaffolded project's tools
// run as other users when the tests run as root, and those must reach their files. (Such tools,
// in /tmp, keep the host's /tmp: see tools.Runner.HostTmpReason.)
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
