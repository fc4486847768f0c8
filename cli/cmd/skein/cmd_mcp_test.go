package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skein-mesh/skein/cli/mcpserve"
	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

const mcpAskerScript = `
rules:
  - when: {last: "\"question\":\"slow\""}
    delay_s: 600
    reply: {text: "too late"}
  - when: {last: "\"question\":\"impossible\""}
    reply: {tool_calls: [{name: finish, args: {accomplished: false, answer: "Could not.", reason: "no data"}}]}
  - when: {last: "\"question\":"}
    reply: {text: "Answer."}
`

// An agent served over MCP, on an embedded mesh, called with the Go SDK's client: its declared
// schema checks the arguments and the arguments become its task; an outcome that is not a
// success is an error result; --max-calls refuses a call over it; a cancelled request cancels
// its session.
func TestMCPServeCallsAgents(t *testing.T) {
	cfg := config.Default()
	cfg.Agent.Name = "asker"
	cfg.Agent.Description = "Answers one question."
	cfg.Agent.InputSchema = map[string]any{"type": "object", "properties": map[string]any{"question": map[string]any{"type": "string"}},
		"required": []any{"question"}, "additionalProperties": false}
	useScript(t, cfg, mcpAskerScript)
	cfg.Memory.Enabled, cfg.Miner.Enabled = false, false
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := connAs(t, upInProcess(ctx, t, cfg, filepath.Join(t.TempDir(), "home"), meshLogger(), ""), auth.Client)
	names := protocol.NewNames(cfg.Mesh.Namespace)
	srv, err := mcpserve.New(ctx, conn, names, []string{"asker"}, mcpserve.Options{MaxCalls: 1, Logger: meshLogger(),
		Cancel: func(ctx context.Context, session, reason string) error {
			_, err := cancelSession(ctx, conn, names, session, "test", reason)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	var running atomic.Bool
	var slowSession atomic.Value
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if id, ok := strings.CutPrefix(req.Params.Message, "session "); ok {
				slowSession.Store(strings.Fields(id)[0])
			}
			if strings.Contains(req.Params.Message, "step_started") {
				running.Store(true)
			}
		}})
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "asker" || list.Tools[0].Description != "Answers one question." {
		t.Fatalf("tools: %+v, %v", list, err)
	}
	callText := func(args map[string]any) (*mcp.CallToolResult, string) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "asker", Arguments: args})
		if err != nil {
			t.Fatalf("call %v: %v", args, err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return res, b.String()
	}
	if res, text := callText(map[string]any{"question": "why"}); res.IsError || text != "Answer." {
		t.Errorf("a question: %q %+v", text, res)
	}
	if res, text := callText(map[string]any{"topic": "why"}); !res.IsError || !strings.Contains(text, "arguments of asker") {
		t.Errorf("arguments the schema refuses: %q", text)
	}
	if res, text := callText(map[string]any{"question": "impossible"}); !res.IsError ||
		!strings.Contains(text, string(protocol.OutcomeNotAccomplished)) || !strings.Contains(text, "no data") {
		t.Errorf("an outcome that is not a success: %q", text)
	}

	// One call at most: a second one while the slow one runs is refused; cancelling the slow
	// request cancels its session.
	slowCtx, stopSlow := context.WithCancel(ctx)
	slowDone := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "asker", Arguments: map[string]any{"question": "slow"}}
		p.SetProgressToken("slow")
		_, err := cs.CallTool(slowCtx, p)
		slowDone <- err
	}()
	poll.True(t, time.Minute, "the slow call's session running", running.Load)
	if res, text := callText(map[string]any{"question": "again"}); !res.IsError || !strings.HasPrefix(text, "busy:") {
		t.Errorf("a call over --max-calls: %q", text)
	}
	stopSlow()
	if err := <-slowDone; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	session, _ := slowSession.Load().(string)
	poll.True(t, time.Minute, "the cancelled call's session ends cancelled", func() bool {
		evs, _ := trace.Read(ctx, conn.JS, names, session)
		for _, ev := range evs {
			if ev.Type.Terminal() {
				return ev.Outcome == protocol.OutcomeCancelled
			}
		}
		return false
	})
}
