package toolhost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

// The tools of a mounted MCP server are in the catalogue and answer on skein.tool.<name> like
// any tool; a repeat of a call id is answered from the call ledger, so the server's side effect
// happens once; the manifest tools of the same host are served beside them.
func TestMCPServerToolsAreServedLikeAnyTool(t *testing.T) {
	// Outside /tmp (the server has its own) and open to the uid the server runs as.
	dir := devtest.SharedDir(t)
	m := bustest.Start(t)
	cfg := testConfig(t)
	cfg.Tools.Enabled = []string{"echo"}
	cfg.Tools.MCP = map[string]config.MCPServer{
		"fs": {Command: "node", Args: []string{devtest.MCPServerJS(t, "server-filesystem"), dir}, Allow: []string{"write_file", "read_text_file"}, TimeoutS: 7},
	}
	startHost(t, m, cfg, "host-mcp")

	var specs []protocol.ToolSpec
	poll.True(t, 60*time.Second, "the server's tools in the catalogue", func() bool {
		specs, _ = tools.Catalog(context.Background(), m.Conn.JS, m.Names, nil)
		return len(specs) == 3
	})
	names := []string{specs[0].Name, specs[1].Name, specs[2].Name}
	if !slices.Equal(names, []string{"echo", "fs__read_text_file", "fs__write_file"}) {
		t.Fatalf("catalogue: %v", names)
	}
	if w := specs[2]; w.MCP != "fs" || w.MCPTool != "write_file" || w.TimeoutS != 7 {
		t.Errorf("spec of fs__write_file: %+v", w)
	}

	file := filepath.Join(dir, "note.txt")
	req := protocol.ToolRequest{Tool: "fs__write_file", SessionID: "s-mcp", StepID: "s1", CallID: "s-mcp.s1.t1.c0",
		Args: json.RawMessage(fmt.Sprintf(`{"path":%q,"content":"written once"}`, file))}
	rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, req, 30*time.Second)
	if err != nil || !rep.OK || rep.Host != "host-mcp" {
		t.Fatalf("write_file: %+v, %v", rep, err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "written once" {
		t.Fatalf("the file: %q, %v", b, err)
	}
	// The redelivered step asks again with the same id: the server is not called again.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	rep, err = tools.Call(context.Background(), m.Conn.NC, m.Names, req, 30*time.Second)
	if err != nil || !rep.OK || !rep.Replayed {
		t.Fatalf("repeat of the call: %+v, %v", rep, err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the repeat wrote the file again: %v", err)
	}
	read := call(t, m, "fs__read_text_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(dir, "missing.txt")), 30*time.Second)
	if read.OK || read.Kind != protocol.ToolErrToolError {
		t.Errorf("reading a missing file: %+v", read)
	}
	if r := call(t, m, "fs__read_text_file", `{"paht":"x"}`, 30*time.Second); r.Kind != protocol.ToolErrBadArgs {
		t.Errorf("a misspelt argument: %+v", r)
	}
	if r := call(t, m, "echo", `{"text":"beside"}`, 30*time.Second); !r.OK {
		t.Errorf("the manifest tool beside the server's: %+v", r)
	}
}

// BenchmarkMCPCall is the per-call cost of an MCP server's tool served through the mesh
// (tools.Call to a toolhost that mounts server-everything: request, claim in the call ledger, the
// MCP call, record, reply) against the same call made directly with the Go SDK's client over
// stdio to another server-everything process. docs/benchmarks.md records both.
func BenchmarkMCPCall(b *testing.B) {
	js := devtest.MCPServerJS(b, "server-everything")
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "0"}, nil)
		sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command("node", js, "stdio")}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		for b.Loop() {
			res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
			if err != nil || res.IsError {
				b.Fatalf("echo: %+v, %v", res, err)
			}
		}
	})
	b.Run("mesh", func(b *testing.B) {
		m := bustest.Start(b)
		cfg := config.Default()
		cfg.Tools.MCP = map[string]config.MCPServer{"everything": {Command: "node", Args: []string{js, "stdio"}}}
		startHost(b, m, cfg, "host-bench")
		poll.True(b, 60*time.Second, "everything__echo in the catalogue", func() bool {
			specs, _ := tools.Catalog(ctx, m.Conn.JS, m.Names, nil)
			return slices.ContainsFunc(specs, func(s protocol.ToolSpec) bool { return s.Name == "everything__echo" })
		})
		n := 0
		for b.Loop() {
			n++
			req := protocol.ToolRequest{Tool: "everything__echo", SessionID: "s-bench", StepID: "s1",
				CallID: fmt.Sprintf("s-bench.s1.t%d.c0", n), Args: json.RawMessage(`{"message":"hi"}`)}
			rep, err := tools.Call(ctx, m.Conn.NC, m.Names, req, 30*time.Second)
			if err != nil || !rep.OK {
				b.Fatalf("everything__echo: %+v, %v", rep, err)
			}
		}
	})
}
