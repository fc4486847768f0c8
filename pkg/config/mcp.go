package config

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/tools/limits"
)

// MCPServer is one entry of `tools.mcp:`, keyed by the server's name: an MCP server started on
// stdio (command) or reached over Streamable HTTP (url), whose tools a toolhost serves as skein
// tools named <name>__<tool>.
type MCPServer struct {
	// Command and Args start a stdio server under the tool sandbox, in Cwd ("": its scratch
	// folder), with Env added to the scrubbed environment. A relative program path with a slash,
	// and arguments starting with ./ or ../, resolve against the config file's folder.
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	Cwd     string            `yaml:"cwd"`
	// URL is a Streamable HTTP server's endpoint; Headers are sent with every request.
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Allow and Deny select the server's tools by their own names (path.Match patterns): none
	// in Allow means every tool; Deny wins.
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
	// TimeoutS bounds one call (0: tools.timeout_s); MaxOutput bounds one result's JSON
	// (0: tools.max_output_bytes).
	TimeoutS  float64 `yaml:"timeout_s"`
	MaxOutput int     `yaml:"max_output_bytes"`
	// StartTimeoutS bounds connecting, initializing and listing tools (0: 30 s).
	StartTimeoutS float64 `yaml:"start_timeout_s"`
	// Sandbox overrides tools.sandbox's limits for a stdio server; they hold over its whole life.
	Sandbox MCPSandbox `yaml:"sandbox"`
}

// MCPSandbox is `tools.mcp.<server>.sandbox:`.
type MCPSandbox struct {
	CPUSeconds     int `yaml:"cpu_s"`
	AddressSpaceMB int `yaml:"address_space_mb"`
	OpenFiles      int `yaml:"open_files"`
	Processes      int `yaml:"processes"`
	// Tmp and SeccompAllow are as a tool manifest's sandbox.tmp ("private" or "host") and
	// sandbox.seccomp_allow (docs/tools.md): a server that drives a browser may need namespaces.
	Tmp          string   `yaml:"tmp"`
	SeccompAllow []string `yaml:"seccomp_allow"`
}

// Limits are the sandbox overrides in the runner's terms.
func (s MCPSandbox) Limits() limits.Limits {
	return limits.Limits{CPUSeconds: s.CPUSeconds, AddressSpaceMB: s.AddressSpaceMB, OpenFiles: s.OpenFiles, Processes: s.Processes}
}

// MCPToolSep joins a server's name and its tool's name into the skein tool's name. Model
// providers accept only letters, digits, '_' and '-' in a tool's name, so not '.'.
const MCPToolSep = "__"

// mcpNameRE is a server's name: short, so <name>__<tool> leaves room for the tool's name
// within protocol.IDTool's 64 characters.
var mcpNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$`)

// maxMCPTimeoutS bounds a server's timeout_s and start_timeout_s, as a manifest's timeout_s.
const maxMCPTimeoutS = limits.MaxTimeoutS

func (s MCPServer) resolvePaths(dir string) MCPServer {
	if s.Command != "" && !filepath.IsAbs(s.Command) && strings.ContainsRune(s.Command, filepath.Separator) {
		s.Command = filepath.Join(dir, s.Command)
	}
	if len(s.Args) > 0 {
		args := slices.Clone(s.Args)
		for i, a := range args {
			if strings.HasPrefix(a, "./") || strings.HasPrefix(a, "../") {
				args[i] = filepath.Join(dir, a)
			}
		}
		s.Args = args
	}
	if s.Cwd != "" && !filepath.IsAbs(s.Cwd) {
		s.Cwd = filepath.Join(dir, s.Cwd)
	}
	return s
}

// validateMCP checks `tools.mcp:`, each server in name order.
func (c *Config) validateMCP(bad reporter) {
	names := make([]string, 0, len(c.Tools.MCP))
	for name := range c.Tools.MCP {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := c.Tools.MCP[name]
		key := "tools.mcp." + name
		if !mcpNameRE.MatchString(name) || strings.Contains(name, MCPToolSep) {
			bad(key, "a server's name is 1 to 24 letters, digits, '-' and '_' (not %q, nor containing %q): its tools are named <server>%s<tool>", MCPToolSep, MCPToolSep, MCPToolSep)
		}
		switch {
		case s.Command == "" && s.URL == "":
			bad(key, "needs command (a stdio server) or url (a Streamable HTTP server)")
		case s.Command != "" && s.URL != "":
			bad(key, "has both command and url; a server is one or the other")
		case s.URL != "":
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(key+".url", "must be an http:// or https:// URL, got %q", s.URL)
			}
			if len(s.Args) > 0 || len(s.Env) > 0 || s.Cwd != "" {
				bad(key, "args, env and cwd are for a stdio server (command), not one at a url")
			}
		default:
			if len(s.Headers) > 0 {
				bad(key+".headers", "are for a server at a url, not a stdio one (command)")
			}
		}
		for k, v := range s.Env {
			if !envNameRE.MatchString(k) {
				bad(key+".env", "%q is not a variable name", k)
			}
			if _, _, err := ExpandEnv(v, func(string) (string, bool) { return "", true }); err != nil {
				bad(key+".env."+k, "%v", err)
			}
		}
		for k, v := range s.Headers {
			if !headerNameRE.MatchString(k) {
				bad(key+".headers", "%q is not a header name", k)
			}
			if _, _, err := ExpandEnv(v, func(string) (string, bool) { return "", true }); err != nil {
				bad(key+".headers."+k, "%v", err)
			}
		}
		for field, pats := range map[string][]string{"allow": s.Allow, "deny": s.Deny} {
			for i, p := range pats {
				if _, err := path.Match(p, ""); err != nil || p == "" {
					bad(fmt.Sprintf("%s.%s[%d]", key, field, i), "%q is not a tool name or pattern (path.Match: *, ?, [...])", p)
				}
			}
		}
		if s.TimeoutS < 0 || s.TimeoutS > maxMCPTimeoutS {
			bad(key+".timeout_s", "must be between 0 (tools.timeout_s) and %d seconds, got %v", maxMCPTimeoutS, s.TimeoutS)
		}
		if s.StartTimeoutS < 0 || s.StartTimeoutS > maxMCPTimeoutS {
			bad(key+".start_timeout_s", "must be between 0 (30 s) and %d seconds, got %v", maxMCPTimeoutS, s.StartTimeoutS)
		}
		if s.MaxOutput < 0 || s.MaxOutput > limits.MaxOutputCeiling {
			bad(key+".max_output_bytes", "must be between 0 (tools.max_output_bytes) and %d, got %d", limits.MaxOutputCeiling, s.MaxOutput)
		}
		for _, msg := range s.Sandbox.Limits().Check("") {
			bad(key+".sandbox", "%s", msg)
		}
		if t := s.Sandbox.Tmp; t != "" && t != "private" && t != "host" {
			bad(key+".sandbox.tmp", "must be private or host, got %q", t)
		}
		if _, err := limits.SeccompAllowMask(s.Sandbox.SeccompAllow); err != nil {
			bad(key+".sandbox", "%v", err)
		}
	}
}

var (
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// ExpandEnv replaces each ${NAME} in s with the variable's value from lookup; $$ is a literal
// '$', and any other '$' is an error, so a value never half-expands. It returns the values it
// put in (the caller registers them as secrets to redact).
func ExpandEnv(s string, lookup func(string) (string, bool)) (out string, used []string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", nil, errors.New("unclosed ${")
			}
			name := s[i+2 : i+end]
			if !envNameRE.MatchString(name) {
				return "", nil, fmt.Errorf("${%s} does not name a variable", name)
			}
			v, ok := lookup(name)
			if !ok {
				return "", nil, fmt.Errorf("environment variable %s is not set", name)
			}
			b.WriteString(v)
			used = append(used, v)
			i += end
		default:
			return "", nil, errors.New("a '$' must start ${NAME} (or be written $$)")
		}
	}
	return b.String(), used, nil
}
