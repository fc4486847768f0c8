package mcpmount

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
	argschema "github.com/skein-mesh/skein/pkg/tools/schema"
)

// MaxTools bounds how many tools of one server are served: a server that lists more has the
// rest ignored, and says so in one log line.
const MaxTools = 512

// Tool is one tool of a mounted server as skein serves it.
type Tool struct {
	// Spec is what the catalogue holds: the skein name <server>__<tool>, the server's
	// description and input schema, the server's call timeout.
	Spec protocol.ToolSpec
	// Remote is the tool's name on its server.
	Remote string
	// schema checks arguments before they reach the server (nil: the server's schema did not
	// compile here, and the server checks them alone).
	schema *argschema.Schema
}

// ToolName is the skein name of a server's tool: <server>__<tool>, with every character a
// model provider does not accept in a tool's name ('.', '/', ' ', ...) written as '_'.
func ToolName(server, remote string) string {
	var b strings.Builder
	b.WriteString(server)
	b.WriteString(config.MCPToolSep)
	for _, r := range remote {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// selected reports whether allow and deny let the server's tool through.
func selected(remote string, allow, deny []string) bool {
	match := func(pats []string) bool {
		return slices.ContainsFunc(pats, func(p string) bool { ok, _ := path.Match(p, remote); return ok })
	}
	return (len(allow) == 0 || match(allow)) && !match(deny)
}

// catalogue turns a server's tool list into the tools served: those allow and deny let
// through, named by ToolName. A tool whose name does not fit, collides with another's, or whose
// schema is not an object is left out, with the reason in skipped.
func catalogue(server string, cfg config.MCPServer, timeoutS float64, listed []*mcp.Tool) (out []Tool, skipped []string) {
	seen := map[string]string{}
	for _, t := range listed {
		if t == nil || !selected(t.Name, cfg.Allow, cfg.Deny) {
			continue
		}
		if len(out) == MaxTools {
			skipped = append(skipped, fmt.Sprintf("%d more tools: at most %d of one server are served", len(listed)-len(out), MaxTools))
			break
		}
		name := ToolName(server, t.Name)
		if err := protocol.IDTool.Check(name); err != nil {
			skipped = append(skipped, fmt.Sprintf("%q: its name %s does not fit: %v", t.Name, name, err))
			continue
		}
		if other, dup := seen[name]; dup {
			skipped = append(skipped, fmt.Sprintf("%q: its name %s is also that of %q", t.Name, name, other))
			continue
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || !isObjectSchema(schema) {
			skipped = append(skipped, fmt.Sprintf("%q: its input schema is not a JSON Schema of type object", t.Name))
			continue
		}
		seen[name] = t.Name
		desc := strings.TrimSpace(t.Description)
		if desc == "" {
			desc = strings.TrimSpace(t.Title)
		}
		if desc == "" {
			desc = fmt.Sprintf("Tool %s of the %s MCP server.", t.Name, server)
		}
		tool := Tool{Remote: t.Name, Spec: protocol.ToolSpec{Name: name, Description: clip(desc, protocol.MaxToolDescription),
			InputSchema: schema, TimeoutS: timeoutS, MCP: server, MCPTool: t.Name}}
		// An object schema that does not compile here (a draft or keyword the validator lacks)
		// is still offered; the server checks the arguments itself.
		tool.schema, _ = argschema.Compile(schema)
		out = append(out, tool)
	}
	return out, skipped
}

func isObjectSchema(raw []byte) bool {
	var s struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(raw, &s) == nil && s.Type == "object"
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := max(n-len(mark), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
