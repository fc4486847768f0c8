package devtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv"
)

// MCPServerJS is the entry point, run with node, of one of the npm MCP servers `make setup`
// installs (mk/mcp.mk), such as server-everything. Without node or the server the test ends as
// Missing says.
func MCPServerJS(t testing.TB, pkg string) string {
	t.Helper()
	NeedProgram(t, "node")
	p := filepath.Join(devenv.ToolsDir(), "mcp", "node", "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
	if _, err := os.Stat(p); err != nil {
		Missing(t, "the MCP server @modelcontextprotocol/"+pkg)
	}
	return p
}

// MCPTimeServer is the python of mcp-server-time's own venv (mk/mcp.mk), which runs it with
// -m mcp_server_time (the venv's scripts name the folder it was made in on their #! line).
func MCPTimeServer(t testing.TB) string {
	t.Helper()
	p := filepath.Join(devenv.ToolsDir(), "mcp", "venv", "bin", "python")
	if _, err := os.Stat(p); err != nil {
		Missing(t, "the MCP server mcp-server-time")
	}
	return p
}
