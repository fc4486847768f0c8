package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

const mcpServedAgent = `
agent:
  name: greeter
  description: Greets whoever asks, in one sentence.
  max_steps: 4
llm:
  provider: scripted
  model: scripted
  script: script.yaml
memory:
  enabled: false
`

const mcpServedScript = `
rules:
  - when: {last: "^say hello"}
    reply: {text: "Hello from skein."}
  - when: {last: "^wait forever"}
    delay_s: 600
    reply: {text: "too late"}
`

// mcpClientReport is what e2e/testdata/mcp_client.py prints.
type mcpClientReport struct {
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	Hello struct {
		Text       string `json:"text"`
		IsError    bool   `json:"is_error"`
		Structured struct {
			SessionID string `json:"session_id"`
			Outcome   string `json:"outcome"`
			FinalText string `json:"final_text"`
		} `json:"structured"`
		Progress []struct {
			Progress float64 `json:"progress"`
			Message  string  `json:"message"`
		} `json:"progress"`
	} `json:"hello"`
	CancelledSession     string `json:"cancelled_session"`
	CancelledCallReturns bool   `json:"cancelled_call_returned"`
	ToolsAfterCancel     int    `json:"tools_after_cancel"`
}

// TestMCPServeWithThePythonSDK runs `skein mcp serve` against a mesh of separate processes and
// drives it with the official MCP Python SDK, over stdio (the SDK starts the server) and over
// Streamable HTTP (with the gateway's bearer token): the agent is listed with its declared
// description and schema, a call runs a session through the gateway and answers with its final
// text and outcome, with progress notifications on the way, and a cancelled request cancels its
// session.
func TestMCPServeWithThePythonSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	py := pythonWithClient(t)
	if err := exec.Command(py, "-c", "import mcp.client.streamable_http").Run(); err != nil {
		devtest.Missing(t, "the MCP Python SDK (mcp) in "+py)
	}
	cfg := writeProject(t, mcpServedAgent, mcpServedScript)
	url := natsServer(t)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + t.TempDir(), "SKEIN_HTTP_TOKEN=skh_e2e-mcp-serve-token-0123456789"}
	args := []string{"--nats", url, "--config", cfg}
	start(t, env, "executor", "executor", args...)
	start(t, env, "planner", "planner", args...)
	start(t, env, "gateway", "gateway", args...)
	bustest.WaitAgent(t, c, meshNames, "greeter")
	skein := filepath.Join(binaries(t), "skein")
	client := filepath.Join(devtest.RepoRoot(t), "e2e", "testdata", "mcp_client.py")

	runClient := func(name string, clientArgs ...string) mcpClientReport {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, append([]string{client}, clientArgs...)...)
		cmd.Env = append(append(os.Environ(), env...), "MCP_AGENT=greeter")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s client: %v\n%s", name, err, stderr.String())
		}
		var rep mcpClientReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("%s client printed %q: %v\n%s", name, out, err, stderr.String())
		}
		return rep
	}
	check := func(name string, rep mcpClientReport) {
		t.Helper()
		if len(rep.Tools) != 1 || rep.Tools[0].Name != "greeter" || rep.Tools[0].Description != "Greets whoever asks, in one sentence." ||
			!strings.Contains(string(rep.Tools[0].InputSchema), `"task"`) {
			t.Errorf("%s: tools %+v", name, rep.Tools)
		}
		h := rep.Hello
		if h.IsError || h.Text != "Hello from skein." || h.Structured.Outcome != string(protocol.OutcomeSuccess) || h.Structured.FinalText != h.Text {
			t.Errorf("%s: the call answered %+v", name, h)
		}
		// Progress: the session named first, then its trace as it happens, ending with its usage.
		if len(h.Progress) < 3 || h.Progress[0].Message != "session "+h.Structured.SessionID+" submitted" ||
			!strings.Contains(h.Progress[1].Message, "session_started") || !strings.Contains(h.Progress[len(h.Progress)-1].Message, "usage") {
			t.Errorf("%s: progress %+v", name, h.Progress)
		}
		for i := 1; i < len(h.Progress); i++ {
			if h.Progress[i].Progress <= h.Progress[i-1].Progress {
				t.Errorf("%s: progress does not increase: %+v", name, h.Progress)
				break
			}
		}
		// The session ran through the gateway as an MCP client's.
		evs := sessiontest.Events(t, c, meshNames, h.Structured.SessionID)
		if len(evs) == 0 || evs[0].Type != protocol.EvSessionStarted || evs[0].Attrs["caller"] != "mcp" {
			t.Errorf("%s: the session's first event: %+v", name, evs)
		}
		if rep.CancelledSession == "" || rep.CancelledCallReturns || rep.ToolsAfterCancel != 1 {
			t.Fatalf("%s: the cancelled call: %+v", name, rep)
		}
		// The cancelled request cancelled its session, which was waiting on a model call of 600 s.
		poll.True(t, time.Minute, name+": the cancelled request's session ends cancelled", func() bool {
			evs := sessiontest.Events(t, c, meshNames, rep.CancelledSession)
			return len(evs) > 0 && outcomeOf(evs) == protocol.OutcomeCancelled
		})
	}

	check("stdio", runClient("stdio", "stdio", skein, "mcp", "serve", "--nats", url, "--config", cfg))

	addr := freePort(t)
	srv := start(t, env, "mcp-http", "skein", "mcp", "serve", "--http", addr, "--nats", url, "--config", cfg)
	waitForLine(t, srv, "skein mcp serve: http://")
	// The gateway's front door: no token, no MCP.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without the bearer token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	check("http", runClient("http", "http", "http://"+addr+"/mcp"))
}
