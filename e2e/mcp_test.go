package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/pkg/trace"
)

// mcpAgent mounts four MCP servers: server-everything twice (one with a 3 s limit, one the test
// kills), server-filesystem on a folder, mcp-server-time from PyPI.
const mcpAgent = `
agent:
  name: assistant
  max_steps: 6
llm:
  provider: scripted
  model: scripted
  script: script.yaml
tools:
  mcp:
    everything:
      command: node
      args: [$EVERYTHING, stdio]
      timeout_s: 3
    crashy:
      command: node
      args: [$EVERYTHING, stdio, $MARKER]
      timeout_s: 60
    fs:
      command: node
      args: [$FS, $DIR]
      allow: [read_text_file, list_directory]
    time:
      command: $TIME
      args: [-m, mcp_server_time, --local-timezone, UTC]
memory:
  enabled: false
`

const mcpScript = `
rules:
  - when: {last: "Echo: hello mesh"}
    reply: {text: "All three MCP servers answered."}
  # A tool failed in these turns: the executor wants the outcome reported through finish.
  - when: {last: "Echo: after the timeout"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "Recovered after the timeout."}}]}
  - when: {last: "Echo: restarted"}
    reply: {tool_calls: [{name: finish, args: {accomplished: true, answer: "The crashed server came back."}}]}
  - when: {last: "timed out after 3s"}
    reply:
      tool_calls: [{name: everything__echo, args: {message: "after the timeout"}}]
  - when: {last: "stopped during the call"}
    reply:
      tool_calls: [{name: crashy__echo, args: {message: "restarted"}}]
  - when: {last: "^use the MCP tools"}
    reply:
      tool_calls:
        - {name: everything__echo, args: {message: "hello mesh"}}
        - {name: fs__read_text_file, args: {path: "$FILE"}}
        - {name: time__get_current_time, args: {timezone: "Asia/Tokyo"}}
  - when: {last: "^wait for the slow tool"}
    reply:
      tool_calls: [{name: everything__trigger-long-running-operation, args: {duration: 600, steps: 600}}]
  - when: {last: "^run the long job"}
    reply:
      tool_calls: [{name: crashy__trigger-long-running-operation, args: {duration: 60, steps: 60}}]
`

// TestMCPServersAsToolsThroughTheMesh runs real MCP servers (npm and PyPI) mounted by a toolhost
// process, called by the scripted model through an executor, the planner and the gateway: three
// servers answering in one turn; a call the server never answers, which times out and is
// recovered from; and a server killed while it runs a call, which fails that call and is
// restarted for the next one.
func TestMCPServersAsToolsThroughTheMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	devtest.NeedProgram(t, "node")
	mcpDir := filepath.Join(devenv.ToolsDir(), "mcp")
	everything := filepath.Join(mcpDir, "node", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	fs := filepath.Join(mcpDir, "node", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	// The venv's python, not its mcp-server-time script, whose #! line names the folder the
	// venv was made in.
	timePy := filepath.Join(mcpDir, "venv", "bin", "python")
	for _, p := range []string{everything, fs, timePy} {
		if _, err := os.Stat(p); err != nil {
			devtest.Missing(t, "the MCP server "+p)
		}
	}
	dir := reachableTempDir(t)
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("the notes on disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("skein-e2e-crashy-%d", time.Now().UnixNano())
	agent := strings.NewReplacer("$EVERYTHING", everything, "$FS", fs, "$DIR", dir, "$TIME", timePy, "$MARKER", marker).Replace(mcpAgent)
	cfg := writeProject(t, agent, strings.ReplaceAll(mcpScript, "$FILE", file))

	url := natsServer(t)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + t.TempDir()}
	args := []string{"--nats", url, "--config", cfg}
	start(t, env, "toolhost", "toolhost", args...)
	start(t, env, "executor", "executor", args...)
	start(t, env, "planner", "planner", args...)
	start(t, env, "gateway", "gateway", args...)
	bustest.WaitAgent(t, c, meshNames, "assistant")
	// The toolhost publishes a server's tools once the server has started and listed them.
	poll.True(t, 2*time.Minute, "every server's tools in the catalogue", func() bool {
		specs, _ := tools.Catalog(context.Background(), c.JS, protocol.NewNames(""), nil)
		n := 0
		for _, s := range specs {
			switch s.Name {
			case "everything__echo", "crashy__echo", "fs__read_text_file", "time__get_current_time":
				n++
			}
		}
		return n == 4
	})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := func(task, session string) []protocol.Event {
		t.Helper()
		sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{Task: task, SessionID: session, Caller: "e2e"})
		evs, err := sessiontest.Follow(ctx, c, meshNames, session)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	calls := func(evs []protocol.Event) (out []protocol.Event) {
		for _, e := range evs {
			if e.Type == protocol.EvToolCall && e.Tool != protocol.ToolFinish {
				out = append(out, e)
			}
		}
		return out
	}

	evs := run("use the MCP tools", "mcp-use")
	if o := outcomeOf(evs); o != protocol.OutcomeSuccess {
		t.Fatalf("mcp-use ended %s: %s", o, lines(evs))
	}
	got := map[string]string{}
	for _, e := range calls(evs) {
		if !e.Result.OK {
			t.Errorf("%s failed: %s", e.Tool, e.Result.Error)
		}
		got[e.Tool] = string(e.Result.Result)
	}
	if !strings.Contains(got["everything__echo"], "Echo: hello mesh") || !strings.Contains(got["fs__read_text_file"], "the notes on disk") ||
		!strings.Contains(got["time__get_current_time"], `"timezone":"Asia/Tokyo"`) {
		t.Errorf("results: %v", got)
	}

	evs = run("wait for the slow tool", "mcp-hang")
	cs := calls(evs)
	if o := outcomeOf(evs); o != protocol.OutcomeSuccessWithRecovery || len(cs) != 2 {
		t.Fatalf("mcp-hang ended %s after %d calls: %s", o, len(cs), lines(evs))
	}
	if r := cs[0].Result; r.OK || r.Kind != protocol.ToolErrTimeout || !strings.Contains(r.Error, "notifications/cancelled") {
		t.Errorf("the call that never answers: %+v", r)
	}

	// The crashy server is killed as soon as the call runs, and again whenever it is back, until
	// the call has failed: the call cannot finish on a server started after it began.
	sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{Task: "run the long job", SessionID: "mcp-crash", Caller: "e2e"})
	var killed []int
	var mu sync.Mutex
	failed := make(chan struct{})
	go func() {
		running := false
		_ = trace.Follow(ctx, c.JS, protocol.NewNames(""), "mcp-crash", func(ev protocol.Event) bool {
			switch {
			case ev.Type == protocol.EvToolAttempt && ev.Tool == "crashy__trigger-long-running-operation" && !running:
				running = true
				go func() {
					for {
						select {
						case <-failed:
							return
						case <-ctx.Done():
							return
						// fault injection: the server is killed again within 20 ms of each start.
						case <-time.After(20 * time.Millisecond):
						}
						for _, pid := range pidsWith(marker) {
							if syscall.Kill(pid, syscall.SIGKILL) == nil {
								mu.Lock()
								killed = append(killed, pid)
								mu.Unlock()
							}
						}
					}
				}()
			case ev.Type == protocol.EvToolCall && ev.Tool == "crashy__trigger-long-running-operation":
				close(failed)
				return false
			}
			return true
		})
	}()
	evs, err := sessiontest.Follow(ctx, c, meshNames, "mcp-crash")
	if err != nil {
		t.Fatal(err)
	}
	cs = calls(evs)
	if o := outcomeOf(evs); o != protocol.OutcomeSuccessWithRecovery || len(cs) != 2 {
		t.Fatalf("mcp-crash ended %s after %d calls: %s", o, len(cs), lines(evs))
	}
	if r := cs[0].Result; r.OK || r.Kind != protocol.ToolErrExit || !strings.Contains(r.Error, "killed by signal") {
		t.Errorf("the call whose server was killed: %+v", r)
	}
	if r := cs[1].Result; !r.OK || !strings.Contains(string(r.Result), "Echo: restarted") {
		t.Errorf("the call after the restart: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(killed) == 0 {
		t.Errorf("the test killed no server")
	}
}

// lines is a session's trace as text, for a failure's message.
func lines(evs []protocol.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString("\n  " + trace.Line(e))
	}
	return b.String()
}

// pidsWith lists the processes whose command line holds marker.
func pidsWith(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}
