package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestToolsMCPLoadsAndResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "agent.yaml", `
tools:
  mcp:
    fs:
      command: node
      args: [./servers/fs.js, /data]
      env: {TOKEN: "${FS_TOKEN}", MODE: "a$$b"}
      cwd: work
      deny: ["write_*"]
      timeout_s: 5
      sandbox: {cpu_s: 9000, tmp: host, seccomp_allow: [namespaces]}
    remote:
      url: http://127.0.0.1:9/mcp
      headers: {Authorization: "Bearer ${REMOTE_TOKEN}"}
      allow: [search]
`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	fs := cfg.Tools.MCP["fs"]
	if fs.Args[0] != filepath.Join(dir, "servers", "fs.js") || fs.Args[1] != "/data" || fs.Cwd != filepath.Join(dir, "work") || fs.Command != "node" {
		t.Errorf("paths not resolved against the file's folder: %+v", fs)
	}
	if fs.Sandbox.Limits().CPUSeconds != 9000 || fs.Sandbox.Tmp != "host" || fs.Sandbox.SeccompAllow[0] != "namespaces" || fs.TimeoutS != 5 || fs.Deny[0] != "write_*" {
		t.Errorf("fs = %+v", fs)
	}
	if r := cfg.Tools.MCP["remote"]; r.URL != "http://127.0.0.1:9/mcp" || r.Headers["Authorization"] != "Bearer ${REMOTE_TOKEN}" {
		t.Errorf("remote = %+v", r)
	}
}

func TestToolsMCPErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "agent.yaml", `
tools:
  mcp:
    a__b: {command: x}
    neither: {}
    both: {command: x, url: "http://h/"}
    badurl: {url: "ftp://h/"}
    hdr: {command: x, headers: {X: y}}
    env: {command: x, env: {"1BAD": v, OK: "$HOME"}}
    pat: {command: x, allow: ["[" ]}
    slow: {command: x, timeout_s: 99999}
    sb: {command: x, sandbox: {tmp: shared, seccomp_allow: [everything]}}
`)
	_, err := Load(p)
	if err == nil {
		t.Fatal("bad tools.mcp loaded")
	}
	for _, want := range []string{
		"tools.mcp.a__b: a server's name",
		"tools.mcp.neither: needs command",
		"tools.mcp.both: has both command and url",
		"tools.mcp.badurl.url: must be an http",
		"tools.mcp.hdr.headers: are for a server at a url",
		`tools.mcp.env.env: "1BAD" is not a variable name`,
		"tools.mcp.env.env.OK: a '$' must start ${NAME}",
		`tools.mcp.pat.allow[0]: "[" is not a tool name`,
		"tools.mcp.slow.timeout_s: must be between",
		`tools.mcp.sb.sandbox.tmp: must be private or host, got "shared"`,
		`tools.mcp.sb.sandbox: seccomp_allow: unknown group "everything"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := Load(write(t, dir, "typo.yaml", "tools:\n  mcp:\n    fs: {comand: x}\n")); err == nil ||
		!strings.Contains(err.Error(), "tools.mcp.<server>.comand: unknown key") {
		t.Errorf("unknown key: %v", err)
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"A": "secret-a", "B": "b"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	out, used, err := ExpandEnv("Bearer ${A} $$ ${B}", lookup)
	if err != nil || out != "Bearer secret-a $ b" || len(used) != 2 || used[0] != "secret-a" {
		t.Fatalf("ExpandEnv = %q %v %v", out, used, err)
	}
	for _, bad := range []string{"${MISSING}", "${A", "$A", "${1}"} {
		if _, _, err := ExpandEnv(bad, lookup); err == nil {
			t.Errorf("ExpandEnv(%q) did not fail", bad)
		}
	}
}
