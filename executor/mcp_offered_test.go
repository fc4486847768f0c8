package executor

import (
	"slices"
	"testing"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The tools KV holds every toolhost's tools: an agent is offered its own MCP servers' tools,
// whatever tools.enabled says of manifest tools, and no other agent's.
func TestOfferedTakesTheAgentsOwnMCPServers(t *testing.T) {
	cfg := config.Default()
	cfg.Tools.Enabled = []string{"echo"}
	cfg.Tools.Agents = []string{"helper"}
	cfg.Tools.MCP = map[string]config.MCPServer{"fs": {Command: "x"}}
	d := Deps{Config: cfg}
	if d.catalogNames() != nil {
		t.Fatalf("with MCP servers the whole catalogue is read (their tools' names are not known ahead), got %v", d.catalogNames())
	}
	specs := []protocol.ToolSpec{{Name: "echo"}, {Name: "sum"}, {Name: "helper", Agent: "helper"}, {Name: "other", Agent: "other"},
		{Name: "fs__read_file", MCP: "fs"}, {Name: "git__log", MCP: "git"}}
	var got []string
	for _, s := range d.offered(specs) {
		got = append(got, s.Name)
	}
	if want := []string{"echo", "helper", "fs__read_file"}; !slices.Equal(got, want) {
		t.Errorf("offered %v, want %v", got, want)
	}
	cfg.Tools.MCP = nil
	if n := d.catalogNames(); !slices.Equal(n, []string{"echo", "helper"}) {
		t.Errorf("catalogNames without MCP servers: %v", n)
	}
}
