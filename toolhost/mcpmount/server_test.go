package mcpmount

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

func everything(t *testing.T, extra config.MCPServer) config.MCPServer {
	extra.Command = "node"
	extra.Args = []string{devtest.MCPServerJS(t, "server-everything"), "stdio"}
	return extra
}

func call(t *testing.T, m *mounted, tool Tool, args string) protocol.ToolResult {
	t.Helper()
	return m.Call(context.Background(), tool, json.RawMessage(args))
}

// server-everything, started under the sandbox, is served tool by tool: its results, structured
// content, images and errors in skein's shape, its environment the sandbox's plus the configured
// variables, and its list followed when it says it changed.
func TestEverythingServerIsServedAsTools(t *testing.T) {
	const token = "mcp-test-token-7f3a9c2e51"
	t.Setenv("SKEIN_MCP_TEST_TOKEN", token)
	t.Setenv("SKEIN_TEST_PROVIDER_KEY", "sk-ant-must-not-reach-the-server-0123")
	m := mount(t, "everything", everything(t, config.MCPServer{Env: map[string]string{"EVERYTHING_TOKEN": "${SKEIN_MCP_TEST_TOKEN}"}}), Options{})

	echo := m.tool(t, "everything__echo")
	if echo.Spec.MCP != "everything" || echo.Remote != "echo" || !strings.Contains(string(echo.Spec.InputSchema), `"message"`) {
		t.Errorf("echo's spec: %+v", echo.Spec)
	}
	if res := call(t, m, echo, `{"message":"hi"}`); !res.OK || string(res.Result) != `"Echo: hi"` {
		t.Errorf("echo: %+v", res)
	}
	if res := call(t, m, m.tool(t, "everything__get-sum"), `{"a":"one","b":2}`); res.OK || res.Kind != protocol.ToolErrBadArgs || !strings.Contains(res.Error, "/a") {
		t.Errorf("get-sum with a string: %+v", res)
	}
	res := call(t, m, m.tool(t, "everything__get-structured-content"), `{"location":"Chicago"}`)
	var weather struct {
		Temperature float64 `json:"temperature"`
	}
	if !res.OK || json.Unmarshal(res.Result, &weather) != nil || weather.Temperature != 36 {
		t.Errorf("structured content: %+v", res)
	}
	res = call(t, m, m.tool(t, "everything__get-tiny-image"), `{}`)
	if !res.OK || !strings.Contains(string(res.Result), `{"type":"image","mime_type":"image/png","bytes":`) {
		t.Errorf("image content: %s", res.Result)
	}

	// The server's environment: the sandbox's, with the configured variable expanded.
	res = call(t, m, m.tool(t, "everything__get-env"), `{}`)
	var env map[string]string
	if !res.OK || json.Unmarshal(res.Result, &env) != nil {
		t.Fatalf("get-env: %+v", res)
	}
	// HOME is its scratch folder, which is its own /tmp where the sandbox gives calls one.
	if env["EVERYTHING_TOKEN"] != token || env["SKEIN_TEST_PROVIDER_KEY"] != "" ||
		(env["HOME"] != "/tmp" && !strings.Contains(env["HOME"], "skein-tool-mcp-everything-")) {
		t.Errorf("the server's environment is not the sandbox's: token %q, key %q, HOME %q", env["EVERYTHING_TOKEN"], env["SKEIN_TEST_PROVIDER_KEY"], env["HOME"])
	}
	if got := redact.String("sent " + token); got != "sent "+redact.Mask {
		t.Errorf("a value taken from the environment is not redacted: %q", got)
	}
	// Confined as a call is: no_new_privs and the seccomp filter, and a uid of its own (from the
	// pool: not the host's) when the host is root.
	if procStatus(t, m.Pid(), "NoNewPrivs") != "1" || procStatus(t, m.Pid(), "Seccomp") != "2" {
		t.Errorf("the server runs without no_new_privs or the seccomp filter")
	}
	if os.Geteuid() == 0 {
		if uid := procStatus(t, m.Pid(), "Uid"); uid == "0" {
			t.Errorf("the server runs as root")
		}
	}
	// It registers simulate-research-query once initialized and says its tools changed.
	m.tool(t, "everything__simulate-research-query")
	poll.True(t, 30*time.Second, "a second listing after notifications/tools/list_changed", func() bool { return m.listCount() >= 2 })
}

// procStatus is the first value of a field of /proc/<pid>/status.
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Fields(v)[0]
		}
	}
	return ""
}

// A call the server never answers in time ends at the server's time limit as a timeout, the
// server is told to cancel it, and it goes on serving other calls.
func TestACallTheServerDoesNotAnswerTimesOut(t *testing.T) {
	m := mount(t, "everything", everything(t, config.MCPServer{TimeoutS: 1}), Options{})
	slow := m.tool(t, "everything__trigger-long-running-operation")
	pid := m.Pid()
	start := time.Now()
	res := call(t, m, slow, `{"duration":120,"steps":120}`)
	if res.OK || res.Kind != protocol.ToolErrTimeout || !strings.Contains(res.Error, "notifications/cancelled") {
		t.Fatalf("slow call: %+v", res)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the timeout of 1s took %s", took)
	}
	if res := call(t, m, m.tool(t, "everything__echo"), `{"message":"still here"}`); !res.OK || m.Pid() != pid {
		t.Errorf("after the timeout: %+v (pid %d, was %d)", res, m.Pid(), pid)
	}
	// A caller that stops waiting (its session cancelled) cancels the call the same way.
	ctx, cancel := context.WithCancelCause(context.Background())
	// fault injection: the caller gives up while the call runs on the server; not a wait.
	time.AfterFunc(200*time.Millisecond, func() { cancel(fmt.Errorf("session cancelled")) })
	if res := m.Call(ctx, slow, json.RawMessage(`{"duration":120,"steps":120}`)); res.Kind != protocol.ToolErrTimeout || !strings.Contains(res.Error, "session cancelled") {
		t.Errorf("abandoned call: %+v", res)
	}
}

// A server killed during a call fails that call with what happened and its stderr, and is
// started again: the next call is served by the new process.
func TestAServerKilledMidCallFailsTheCallAndIsRestarted(t *testing.T) {
	defer fastRestarts()()
	m := mount(t, "everything", everything(t, config.MCPServer{}), Options{})
	slow := m.tool(t, "everything__trigger-long-running-operation")
	pid := m.Pid()
	got := make(chan protocol.ToolResult, 1)
	go func() { got <- call(t, m, slow, `{"duration":60,"steps":60}`) }()
	// fault injection: kill the server once the call has most likely reached it; not a wait,
	// the test holds whether the kill lands before or during the call.
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.OK || res.Kind != protocol.ToolErrExit || !strings.Contains(res.Error, "killed by signal") || !strings.Contains(res.Error, "may or may not have taken effect") {
		t.Fatalf("call during the kill: %+v", res)
	}
	poll.True(t, 60*time.Second, "the server started again", func() bool { p := m.Pid(); return p != 0 && p != pid })
	if res := call(t, m, m.tool(t, "everything__echo"), `{"message":"again"}`); !res.OK {
		t.Errorf("echo after the restart: %+v", res)
	}
	if w := m.logs.lines(slog.LevelWarn); len(w) != 1 || !strings.Contains(w[0], "MCP server stopped; starting it again") {
		t.Errorf("warnings: %q", w)
	}
}

// fastRestarts shortens the restart backoff for a test.
func fastRestarts() func() {
	lo, hi := restartMin, restartMax
	restartMin, restartMax = 20*time.Millisecond, 100*time.Millisecond
	return func() { restartMin, restartMax = lo, hi }
}

// A server that cannot start is said once, with the reason, while it is tried again with
// backoff; its calls fail as unavailable, naming why.
func TestAServerThatCannotStartSaysSoOnce(t *testing.T) {
	defer fastRestarts()()
	devtest.MCPServerJS(t, "server-everything") // node and setup present
	m := mount(t, "broken", config.MCPServer{Command: "node", Args: []string{"-e", "console.error('cannot open the database'); process.exit(3)"}}, Options{})
	poll.True(t, 30*time.Second, "three tries", func() bool { return len(m.logs.lines(slog.LevelDebug)) >= 2 })
	warn := m.logs.lines(slog.LevelWarn)
	if len(warn) != 1 || !strings.Contains(warn[0], "MCP server cannot start") || !strings.Contains(warn[0], "exited with status 3: cannot open the database") ||
		!strings.Contains(warn[0], "tools.mcp.broken.command") {
		t.Fatalf("warnings: %q", warn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := m.Call(ctx, Tool{Remote: "x", Spec: protocol.ToolSpec{Name: "broken__x"}}, nil)
	if res.Kind != protocol.ToolErrUnavailable || !strings.Contains(res.Error, "cannot open the database") {
		t.Errorf("call of a server that is down: %+v", res)
	}
	if m.listCount() != 0 {
		t.Errorf("a server that never started listed tools")
	}
}

// server-filesystem serves the folder its arguments name; allow and deny pick its tools.
func TestFilesystemServerWithAllowAndDeny(t *testing.T) {
	dir, err := os.MkdirTemp("", "skein-mcp-fs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.MCPServer{Command: "node", Args: []string{devtest.MCPServerJS(t, "server-filesystem"), dir},
		Allow: []string{"read_*", "list_*"}, Deny: []string{"read_media_file"}}
	m := mount(t, "fs", cfg, Options{})
	read := m.tool(t, "fs__read_text_file")
	m.mu.Lock()
	for _, tl := range m.lists[len(m.lists)-1] {
		if r := tl.Remote; !(strings.HasPrefix(r, "read_") || strings.HasPrefix(r, "list_")) || r == "read_media_file" {
			t.Errorf("allow/deny let %s through", r)
		}
	}
	m.mu.Unlock()
	if res := call(t, m, read, fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "hello.txt"))); !res.OK || !strings.Contains(string(res.Result), "hello from disk") {
		t.Errorf("read_text_file: %+v", res)
	}
	res := call(t, m, read, `{"path":"/etc/passwd"}`)
	if res.OK || res.Kind != protocol.ToolErrToolError || !strings.Contains(res.Error, "denied") {
		t.Errorf("a file outside the allowed folder: %+v", res)
	}
}

// mcp-server-time from PyPI: a Python server; its JSON text comes back as a JSON value.
func TestTimeServerFromPyPI(t *testing.T) {
	m := mount(t, "time", config.MCPServer{Command: devtest.MCPTimeServer(t), Args: []string{"-m", "mcp_server_time", "--local-timezone", "UTC"}}, Options{})
	res := call(t, m, m.tool(t, "time__get_current_time"), `{"timezone":"Europe/Paris"}`)
	var out struct {
		Timezone string `json:"timezone"`
		Datetime string `json:"datetime"`
	}
	if !res.OK || json.Unmarshal(res.Result, &out) != nil || out.Timezone != "Europe/Paris" || out.Datetime == "" {
		t.Errorf("get_current_time: %+v", res)
	}
}

// A server over Streamable HTTP gets the configured headers, their values from the environment
// and redacted; when it goes away its calls fail, and it is reached again once it is back.
func TestStreamableHTTPServerWithHeaders(t *testing.T) {
	defer fastRestarts()()
	js := devtest.MCPServerJS(t, "server-everything")
	const token = "http-bearer-5c1d7e9a3b"
	t.Setenv("SKEIN_MCP_TEST_HTTP_TOKEN", token)
	port := freePort(t)
	stop := startHTTPEverything(t, js, port)
	target, _ := url.Parse("http://127.0.0.1:" + port)
	var mu sync.Mutex
	var auths []string
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close) // after the server's connection ends (cleanups run last first)
	m := mount(t, "remote", config.MCPServer{URL: front.URL + "/mcp", Headers: map[string]string{"Authorization": "Bearer ${SKEIN_MCP_TEST_HTTP_TOKEN}"}}, Options{})
	echo := m.tool(t, "remote__echo")
	if res := call(t, m, echo, `{"message":"over http"}`); !res.OK || string(res.Result) != `"Echo: over http"` {
		t.Errorf("echo over HTTP: %+v", res)
	}
	mu.Lock()
	for _, a := range auths {
		if a != "Bearer "+token {
			t.Errorf("a request went without the configured header: %q", a)
		}
	}
	mu.Unlock()
	if got := redact.String("Authorization: " + token); strings.Contains(got, token) {
		t.Errorf("the header's value is not redacted: %q", got)
	}
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res := m.Call(ctx, echo, json.RawMessage(`{"message":"gone"}`))
	cancel()
	if res.OK {
		t.Errorf("a call to a server that is gone succeeded: %+v", res)
	}
	startHTTPEverything(t, js, port)
	poll.True(t, 60*time.Second, "the server is reached again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return m.Call(ctx, echo, json.RawMessage(`{"message":"back"}`)).OK
	})
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// startHTTPEverything runs server-everything over Streamable HTTP on port, as a remote server
// would be: outside the toolhost's sandbox. The returned stop kills it.
func startHTTPEverything(t *testing.T, js, port string) (stop func()) {
	t.Helper()
	cmd := exec.Command("node", js, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	poll.True(t, 30*time.Second, "server-everything listens on "+port, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return stop
}
