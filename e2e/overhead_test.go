package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/tools"
)

var overheadRun = flag.Bool("overhead", false, "run TestToolCallOverhead (make bench-overhead)")

// echoEnv makes the test binary a bare NATS responder (see TestMain): the other process of the
// request/reply baseline.
const echoEnv = "SKEIN_E2E_ECHO_NATS"

const echoSubject = "bench.echo"

// echoResponder answers every request on echoSubject with its own payload until stdin closes.
func echoResponder(url string) int {
	// The mesh's admin credentials, from $SKEIN_CREDS_DIR (startUp sets it).
	opt, err := nats.NkeyOptionFromSeed(auth.Resolve(auth.Admin, auth.Source{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	if _, err := nc.Subscribe(echoSubject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := nc.Flush(); err != nil {
		return 1
	}
	fmt.Println("ready")
	_, _ = bytes.NewBuffer(nil).ReadFrom(os.Stdin)
	return 0
}

// overheadCalls is how many sequential tool calls the long session makes.
const overheadCalls = 50

// The scripted model calls sum once ("add once": [1,1] sums to 2, which no rule answers with
// another call) or overheadCalls times in a row ("add many": every "sum: 10" result gets the same
// call again until the rule's count is used up). The calls are sequential: one per model turn.
var overheadScript = fmt.Sprintf(`
rules:
  - when: {last: "^add once"}
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [1, 1]}}
  - when: {last: "^add many"}
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
  - when: {last: "sum: 10"}
    times: %d
    reply:
      tool_calls:
        - {name: sum, args: {numbers: [2, 3, 5]}}
  - reply: {text: "Done."}
`, overheadCalls)

var overheadAgent = fmt.Sprintf(`
agent:
  name: assistant
  max_steps: %d
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  manifest_dirs: [$TOOLS]
  enabled: [sum]
memory:
  enabled: false
`, overheadCalls+5)

func median(ds []time.Duration) time.Duration { return percentile(ds, 0.5) }

// TestToolCallOverhead measures, side by side in one run, what a sequential tool call costs on
// the mesh beyond the tool's own run time, against a bare NATS request/reply between two
// processes. Per-call time is (session of N calls - session of 1 call) / (N-1), which takes out
// the session's fixed costs (submit, planning, result, usage); the tool's own run time is a
// direct fork/exec of the same program with the same input, and also the same tool run through
// tools.Runner with the toolhost's sandbox, as the toolhost runs it; the overhead is given
// against both.
func TestToolCallOverhead(t *testing.T) {
	if !*overheadRun {
		t.Skip("benchmark: run with -overhead (make bench-overhead)")
	}
	// SKEIN_OVERHEAD_RUN_AS sets tools.sandbox.run_as of the mesh and of the runner below (e.g.
	// "current", to see the traced start on a root host without CAP_SYS_RESOURCE).
	runAs := os.Getenv("SKEIN_OVERHEAD_RUN_AS")
	toolDir, toolName := overheadTool(t)
	agent := strings.ReplaceAll(overheadAgent, "$TOOLS", toolDir)
	if runAs != "" {
		agent = strings.Replace(agent, "  enabled: [sum]\n", fmt.Sprintf("  enabled: [sum]\n  sandbox: {run_as: %q}\n", runAs), 1)
	}
	m := startUp(t, writeProject(t, agent, overheadScript))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// Bare NATS: this process asks, a second process answers, on the mesh's own server.
	echo := exec.Command(os.Args[0])
	echo.Env = append(os.Environ(), echoEnv+"="+m.url)
	stdin, _ := echo.StdinPipe()
	var out bytes.Buffer
	echo.Stdout = &out
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = echo.Wait() })
	poll.True(t, 20*time.Second, "the echo responder to start", func() bool { return bytes.Contains(out.Bytes(), []byte("ready")) })
	payload := bytes.Repeat([]byte("x"), 200) // about a tool request's size
	var bare []time.Duration
	for round := 0; round < 5; round++ {
		const n = 1000
		start := time.Now()
		for i := 0; i < n; i++ {
			if _, err := m.c.NC.Request(echoSubject, payload, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		bare = append(bare, time.Since(start)/n)
	}

	// The tool's own run time.
	ts, err := tools.LoadDirs([]string{toolDir}, []string{"sum"})
	if err != nil || len(ts) != 1 {
		t.Fatalf("load sum: %v (%d tools)", err, len(ts))
	}
	sum := ts[0].Argv[0]
	var tool []time.Duration
	for i := 0; i < 50; i++ {
		cmd := exec.Command(sum)
		cmd.Stdin = bytes.NewReader([]byte(`{"numbers":[2,3,5]}`))
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		tool = append(tool, time.Since(start))
	}

	// The tool's run time as the toolhost runs it: the same manifest through tools.Runner with
	// the toolhost's (default) sandbox, so scratch folder, uid, limits, cgroup and tree kill
	// included.
	// The trampoline, where one is used, is the one next to the mesh's binaries, as for the mesh.
	runner := tools.Runner{Sandbox: tools.Sandbox{RunAs: runAs, Trampoline: filepath.Join(binaries(t), "skein-tool-sandbox")}}
	sandbox, err := runner.SandboxInfo()
	if err != nil {
		t.Fatal(err)
	}
	var sandboxed []time.Duration
	for i := 0; i < 50; i++ {
		start := time.Now()
		if res := runner.Run(ctx, ts[0], json.RawMessage(`{"numbers":[2,3,5]}`)); !res.OK {
			t.Fatalf("sandboxed sum: %+v", res)
		}
		sandboxed = append(sandboxed, time.Since(start))
	}

	// Sessions, alternating so that machine noise hits both alike.
	var once, many []time.Duration
	session := func(task string) time.Duration {
		r := runSession(ctx, m.c, task)
		if r.err != nil || !r.outcome.Succeeded() {
			t.Fatalf("%s: outcome %q, %v", task, r.outcome, r.err)
		}
		return r.latency()
	}
	session("add once (warm-up)")
	for i := 0; i < 7; i++ {
		once = append(once, session(fmt.Sprintf("add once (%d)", i)))
		many = append(many, session(fmt.Sprintf("add many (%d)", i)))
	}
	perCall := (median(many) - median(once)) / (overheadCalls - 1)
	overhead := perCall - median(tool)
	overheadSandboxed := perCall - median(sandboxed)
	t.Logf("\ntool call overhead (%d sequential calls vs 1, medians of %d sessions each)\n"+
		"  bare NATS request/reply, two processes: %s\n"+
		"  tool's own run time (fork/exec of %s): %s\n"+
		"  tool's run time in the sandbox:         %s\n"+
		"    (%s)\n"+
		"  session with 1 call:                    %s\n"+
		"  session with %d calls:                  %s\n"+
		"  mesh time per call:                     %s\n"+
		"  mesh overhead per call (minus fork/exec): %s = %.1f× bare NATS\n"+
		"  mesh overhead per call (minus sandboxed run): %s = %.1f× bare NATS\n",
		overheadCalls, len(once), median(bare), toolName, median(tool), median(sandboxed), sandbox, median(once), overheadCalls, median(many), perCall,
		overhead, float64(overhead)/float64(median(bare)), overheadSandboxed, float64(overheadSandboxed)/float64(median(bare)))
}

// overheadTool is the benchmark's tool: by default the static C build of sum
// (e2e/testdata/csum), as the issue measured it, so the figures are the mesh's and not a
// runtime's start; SKEIN_OVERHEAD_TOOL=go takes the Go example tool instead. It returns a
// manifest folder holding a tool named sum, and what that tool is.
func overheadTool(t *testing.T) (dir, what string) {
	t.Helper()
	root := devtest.RepoRoot(t)
	switch os.Getenv("SKEIN_OVERHEAD_TOOL") {
	case "go":
		binaries(t) // builds examples/tools/sum when it is missing
		return filepath.Join(root, "examples", "tools"), "the Go sum"
	case "", "c":
	default:
		t.Fatalf("SKEIN_OVERHEAD_TOOL=%q: want c (the default) or go", os.Getenv("SKEIN_OVERHEAD_TOOL"))
	}
	// Outside /tmp, so that the tool's calls get their own /tmp as any installed tool's do (a tool
	// in /tmp keeps the host's), and reachable by the tools' users.
	dir = devtest.SharedDir(t)
	cc := exec.Command("cc", "-O2", "-static", "-o", filepath.Join(dir, "sum"), filepath.Join(root, "e2e", "testdata", "csum", "sum.c"))
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("build the C sum tool (a C compiler and a static libc are needed; SKEIN_OVERHEAD_TOOL=go uses the Go one): %v\n%s", err, out)
	}
	manifest, err := os.ReadFile(filepath.Join(root, "examples", "tools", "sum.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest = bytes.Replace(manifest, []byte(`"./sum/sum"`), []byte(`"./sum"`), 1)
	if err := os.WriteFile(filepath.Join(dir, "sum.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, "the static C sum"
}
