package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The `skein` CLI as a new user meets it: the built binary, run from a temp project folder, with
// its state in a temp $SKEIN_HOME and no mesh URL in the environment.

// cliResult is one finished `skein` invocation.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return "exit " + strconv.Itoa(r.code) + "\n--- stdout ---\n" + r.stdout + "\n--- stderr ---\n" + r.stderr
}

// cliEnv is the environment a new user's shell would give skein: the test's own, minus anything
// that points at an existing mesh, with state under home. SKEIN_TOOLS_DIR is kept (or found) so
// the embedded memoryd can load the embedder that `make setup` installed.
func cliEnv(t *testing.T, home string) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "SKEIN_NATS_URL", "SKEIN_HOME", "SKEIN_LOG", "SKEIN_CREDS", "SKEIN_CREDS_DIR":
			continue
		}
		env = append(env, kv)
	}
	if os.Getenv("SKEIN_TOOLS_DIR") == "" {
		if d := filepath.Join(devtest.RepoRoot(t), ".tools"); dirExists(d) {
			env = append(env, "SKEIN_TOOLS_DIR="+d)
		}
	}
	return append(env, "SKEIN_HOME="+home)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// skein runs the CLI in dir with exactly env and returns what it printed and its exit status.
func skein(t *testing.T, dir string, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	bin := filepath.Join(binaries(t), "skein") // building must not eat the command's own time
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("skein %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("skein %v did not finish in time\n%s", args, res)
	}
	return res
}

// initProject scaffolds a project with `skein init` into a fresh temp folder.
func initProject(t *testing.T, env []string) string {
	t.Helper()
	parent := reachableTempDir(t)
	if r := skein(t, parent, env, "", "init", "proj"); r.code != 0 {
		t.Fatalf("skein init: %s", r)
	}
	return filepath.Join(parent, "proj")
}

var scaffoldFiles = []string{
	"agent.yaml", "agent.offline.yaml", "script.yaml", ".gitignore",
	"tools/agent_tools/hello.json", "tools/agent_tools/hello.py",
}

func TestCLIInit(t *testing.T) {
	parent := reachableTempDir(t)
	env := cliEnv(t, filepath.Join(parent, "home"))
	r := skein(t, parent, env, "", "init", "proj")
	if r.code != 0 {
		t.Fatalf("init: %s", r)
	}
	dir := filepath.Join(parent, "proj")
	for _, f := range scaffoldFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("init did not write %s: %v", f, err)
		}
		if !strings.Contains(r.stdout, "wrote "+filepath.Join("proj", f)) {
			t.Errorf("init output does not list %s:\n%s", f, r.stdout)
		}
	}
	for _, next := range []string{"cd proj", "skein run --config agent.offline.yaml", "ANTHROPIC_API_KEY"} {
		if !strings.Contains(r.stdout, next) {
			t.Errorf("init does not say what to run next (%q):\n%s", next, r.stdout)
		}
	}
	if gi, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); !strings.Contains(string(gi), ".skein/") {
		t.Errorf(".gitignore = %q; want .skein/ in it", gi)
	}
	if st, err := os.Stat(filepath.Join(dir, "tools/agent_tools/hello.py")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("hello.py is not executable: %v", st)
	}
	if r.stderr != "" {
		t.Errorf("init wrote to stderr: %s", r.stderr)
	}

	// A second init keeps the user's edits and says so.
	edited := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(edited, []byte("rules: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = skein(t, parent, env, "", "init", "proj")
	if r.code != 0 {
		t.Fatalf("second init: %s", r)
	}
	if got, _ := os.ReadFile(edited); string(got) != "rules: []\n" {
		t.Errorf("second init overwrote script.yaml")
	}
	for _, f := range scaffoldFiles {
		if !strings.Contains(r.stdout, "kept  "+filepath.Join("proj", f)) {
			t.Errorf("second init does not say it kept %s:\n%s", f, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "--force") {
		t.Errorf("second init does not mention --force:\n%s", r.stdout)
	}

	r = skein(t, parent, env, "", "init", "--force", "proj")
	if r.code != 0 {
		t.Fatalf("init --force: %s", r)
	}
	if got, _ := os.ReadFile(edited); string(got) == "rules: []\n" || !strings.Contains(string(got), "rules:") {
		t.Errorf("init --force did not restore script.yaml: %q", got)
	}
	if !strings.Contains(r.stdout, "wrote "+filepath.Join("proj", "script.yaml")) {
		t.Errorf("init --force output:\n%s", r.stdout)
	}
	if dirExists(filepath.Join(parent, "home")) {
		t.Errorf("init created $SKEIN_HOME; it starts nothing")
	}
}

var usageKeys = []string{
	"cache_creation_input_tokens", "cache_read_input_tokens", "cost_usd", "input_tokens",
	"output_tokens", "steps", "turns", "wall_time_s",
}

type runJSON struct {
	SessionID string `json:"session_id"`
	Outcome   string `json:"outcome"`
	FinalText string `json:"final_text"`
	Reason    string `json:"reason"`
	Usage     struct {
		InputTokens  int64    `json:"input_tokens"`
		OutputTokens int64    `json:"output_tokens"`
		Turns        int      `json:"turns"`
		Steps        int      `json:"steps"` // the old name of turns, printed until the next version
		WallTimeS    float64  `json:"wall_time_s"`
		CostUSD      *float64 `json:"cost_usd"`
	} `json:"usage"`
}

// parseRunJSON checks that stdout is exactly one JSON object with the documented keys.
func parseRunJSON(t *testing.T, r cliResult) runJSON {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, r)
	}
	if rest, _ := io.ReadAll(dec.Buffered()); strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("stdout holds more than one JSON object; after it: %q", rest)
	}
	var keys []string
	for k := range raw {
		if k != "reason" { // a failure's reason may ride along
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if want := []string{"final_text", "outcome", "session_id", "usage"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %v; want %v", keys, want)
	}
	var u map[string]json.RawMessage
	if err := json.Unmarshal(raw["usage"], &u); err != nil {
		t.Fatalf("usage: %v", err)
	}
	var ukeys []string
	for k := range u {
		ukeys = append(ukeys, k)
	}
	sort.Strings(ukeys)
	if !reflect.DeepEqual(ukeys, usageKeys) {
		t.Errorf("usage keys %v; want %v", ukeys, usageKeys)
	}
	var out runJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkTraceFiles checks the mirror a run leaves: valid JSONL ending with a usage event, and a
// readable log.
func checkTraceFiles(t *testing.T, home, session string, logLines ...string) {
	t.Helper()
	f, err := os.Open(filepath.Join(home, "traces", session+".jsonl"))
	if err != nil {
		t.Fatalf("trace file: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	var last, first map[string]any
	n := 0
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("trace line %d is not JSON: %v\n%s", n+1, err, sc.Text())
		}
		if ev["session_id"] != session {
			t.Errorf("trace line %d belongs to %v", n+1, ev["session_id"])
		}
		if n == 0 {
			first = ev
		}
		last = ev
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 3 || first["type"] != "session_started" || last["type"] != "usage" {
		t.Errorf("trace file: %d lines, first %v, last %v; want session_started ... usage", n, first["type"], last["type"])
	}
	log, err := os.ReadFile(filepath.Join(home, "logs", session+".log"))
	if err != nil {
		t.Fatalf("log file: %v", err)
	}
	for _, want := range append([]string{"session_started", "model_call", "usage"}, logLines...) {
		if !strings.Contains(string(log), want) {
			t.Errorf("log file has no %s line:\n%s", want, log)
		}
	}
}

// TestCLINewUser walks the path of a new user on the embedded mesh: init, an offline run with
// --json, a plain run, traces, usage; every run keeps its state in the same $SKEIN_HOME.
func TestCLINewUser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	home := filepath.Join(t.TempDir(), "home")
	env := cliEnv(t, home)
	dir := initProject(t, env)

	r := skein(t, dir, env, "", "run", "--config", "agent.offline.yaml", "--json", "--session-id", "first-run", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("run --json: %s", r)
	}
	res := parseRunJSON(t, r)
	if res.SessionID != "first-run" || res.Outcome != "success_with_recovery" || !strings.Contains(res.FinalText, "Hello, Ada") {
		t.Errorf("result %+v", res)
	}
	if res.Usage.InputTokens <= 0 || res.Usage.OutputTokens <= 0 || res.Usage.Turns <= 0 || res.Usage.Steps != res.Usage.Turns || res.Usage.WallTimeS <= 0 {
		t.Errorf("usage %+v; want tokens, turns (also under the old name steps) and wall time counted", res.Usage)
	}
	if res.Usage.CostUSD == nil || *res.Usage.CostUSD != 0 {
		t.Errorf("cost_usd %v; want 0 for the scripted model", res.Usage.CostUSD)
	}
	if strings.Contains(r.stderr, "session_started") {
		t.Errorf("--json printed progress on stderr:\n%s", r.stderr)
	}
	checkTraceFiles(t, home, "first-run", "tool_call")

	// Plain run: the result on stdout, progress as plain lines on stderr (no terminal here).
	r = skein(t, dir, env, "", "run", "--config", "agent.offline.yaml", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("plain run: %s", r)
	}
	// success, or success_with_recovery: the first run's case may show the second the right call.
	if !strings.Contains(r.stdout, "Hello, Ada") || !strings.Contains(r.stdout, "outcome: success") {
		t.Errorf("plain run stdout:\n%s", r.stdout)
	}
	if strings.ContainsAny(r.stderr, "\r\x1b") {
		t.Errorf("progress on a non-terminal uses terminal control characters: %q", r.stderr)
	}
	for _, want := range []string{"session_started", "tool_call", "final", "usage"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress has no %s line:\n%s", want, r.stderr)
		}
	}
	second := sessionFromPlain(t, r.stdout)
	checkTraceFiles(t, home, second, "tool_call")

	// Resubmitting a session id does not run the task again.
	r = skein(t, dir, env, "", "run", "--config", "agent.offline.yaml", "--json", "--session-id", "first-run", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("rerun of first-run: %s", r)
	}
	if again := parseRunJSON(t, r); again.SessionID != "first-run" || again.Outcome != res.Outcome {
		t.Errorf("rerun %+v", again)
	}

	// A later process sees both sessions: the state lives in $SKEIN_HOME.
	r = skein(t, dir, env, "", "trace", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "first-run") || !strings.Contains(r.stdout, second) {
		t.Errorf("trace list: %s", r)
	}
	if n := strings.Count(r.stdout, "first-run"); n != 1 {
		t.Errorf("trace list shows first-run %d times", n)
	}
	r = skein(t, dir, env, "", "trace", "show", "first-run")
	if r.code != 0 {
		t.Fatalf("trace show: %s", r)
	}
	for _, want := range []string{"session_started", "plan", "model_call", "tool_call", "hello", "final", "usage"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("trace show has no %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "session_started") != 1 {
		t.Errorf("trace show: the resubmitted session started more than once:\n%s", r.stdout)
	}
	r = skein(t, dir, env, "", "trace", "show", "--json", "first-run")
	for i, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("trace show --json line %d is not JSON: %s", i+1, line)
		}
	}
	r = skein(t, dir, env, "", "trace", "show", "nope")
	if r.code == 0 || !strings.Contains(r.stderr, "nope") || r.stdout != "" {
		t.Errorf("trace show of an unknown session: %s", r)
	}
	r = skein(t, dir, env, "", "trace", "tail", second)
	if r.code != 0 || !strings.Contains(r.stdout, "usage") {
		t.Errorf("trace tail of a finished session: %s", r)
	}

	checkUsage(t, dir, env, lastUsage(t, dir, env, "first-run")+lastUsage(t, dir, env, second))

	// Another task under a finished session's id is a follow-up: the next turn of its
	// conversation, a session of its own that continues the transcript.
	r = skein(t, dir, env, "", "run", "--config", "agent.offline.yaml", "--json", "--session-id", "first-run", "Greet Bob")
	if fu := parseRunJSON(t, r); r.code != 0 || fu.SessionID != "first-run-2" {
		t.Errorf("follow-up to first-run: want turn first-run-2, exit 0; %s", r)
	}
}

// lastUsage is the input tokens of a session's last usage event (the miner's, once it has
// mined, supersedes the planner's), read through `skein trace show --json`.
func lastUsage(t *testing.T, dir string, env []string, session string) int64 {
	t.Helper()
	r := skein(t, dir, env, "", "trace", "show", "--json", session)
	if r.code != 0 {
		t.Fatalf("trace show --json %s: %s", session, r)
	}
	var in int64 = -1
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev struct {
			Type   string `json:"type"`
			Report *struct {
				InputTokens int64 `json:"input_tokens"`
			} `json:"report"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "usage" && ev.Report != nil {
			in = ev.Report.InputTokens
		}
	}
	if in <= 0 {
		t.Fatalf("session %s has no usage event with tokens:\n%s", session, r.stdout)
	}
	return in
}

// sessionFromPlain finds the session id in a plain run's result line.
func sessionFromPlain(t *testing.T, stdout string) string {
	t.Helper()
	_, rest, ok := strings.Cut(stdout, "session ")
	if !ok {
		t.Fatalf("no session in:\n%s", stdout)
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// checkUsage reads `skein usage` after two scripted sessions (and a duplicate submit that must
// not count twice), which used input tokens in all.
func checkUsage(t *testing.T, dir string, env []string, input int64) {
	t.Helper()
	today := time.Now().Format("2006-01-02")
	for _, c := range []struct{ by, key, sessions string }{
		{"agent", "greeter", "2"}, {"model", "scripted", "-"}, {"day", today, "2"},
	} {
		r := skein(t, dir, env, "", "usage", "--by", c.by)
		if r.code != 0 {
			t.Errorf("usage --by %s: %s", c.by, r)
			continue
		}
		row := findRow(r.stdout, c.key)
		if row == nil {
			t.Errorf("usage --by %s has no %s row:\n%s", c.by, c.key, r.stdout)
			continue
		}
		// key, sessions, input, output, cache write, cache read, cost
		if len(row) != 7 || row[1] != c.sessions || row[2] != strconv.FormatInt(input, 10) || row[6] != "$0.0000" {
			t.Errorf("usage --by %s row %v; want %s sessions, %d input tokens, $0.0000", c.by, row, c.sessions, input)
		}
	}
	r := skein(t, dir, env, "", "usage", "--by", "bogus")
	if r.code != protocol.ExitUsage || !strings.Contains(r.stderr, "--by") {
		t.Errorf("usage --by bogus: %s", r)
	}
}

func findRow(table, key string) []string {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == key {
			return f
		}
	}
	return nil
}

const stubbornScript = `
rules:
  - when: {system: "(?i)guideline"}
    reply: {text: "Stop calling hello once it has answered."}
  - reply:
      text: "Once more."
      tool_calls: [{name: hello, args: {name: Ada, lang: en}}]
`

const mutedScript = `
rules:
  - when: {last: "^never matches"}
    reply: {text: "unreachable"}
`

// A run that does not succeed exits 1, with the outcome in the JSON.
func TestCLIRunUnsuccessfulExitsOne(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	home := filepath.Join(t.TempDir(), "home")
	env := cliEnv(t, home)
	dir := initProject(t, env)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stubborn.yaml", "agent: {name: stubborn, max_turns: 2}\nllm: {provider: scripted, model: scripted, script: stubborn.script.yaml}\n"+
		"tools: {manifest_dirs: [tools/agent_tools], enabled: [hello]}\n")
	write("stubborn.script.yaml", stubbornScript)
	write("muted.yaml", "agent: {name: muted}\nllm: {provider: scripted, model: scripted, script: muted.script.yaml}\n"+
		"tools: {manifest_dirs: [tools/agent_tools], enabled: [hello]}\n")
	write("muted.script.yaml", mutedScript)

	r := skein(t, dir, env, "", "run", "--config", "stubborn.yaml", "--json", "Greet Ada")
	if r.code != 1 {
		t.Errorf("turn limit: exit %d; want 1\n%s", r.code, r)
	}
	if res := parseRunJSON(t, r); res.Outcome != "incomplete" {
		t.Errorf("turn limit: outcome %q; want incomplete", res.Outcome)
	}

	r = skein(t, dir, env, "", "run", "--config", "muted.yaml", "--json", "Greet Ada")
	if r.code != 1 {
		t.Errorf("no script rule: exit %d; want 1\n%s", r.code, r)
	}
	res := parseRunJSON(t, r)
	if res.Outcome != "failed" || !strings.Contains(res.Reason, "rule") {
		t.Errorf("no script rule: outcome %q reason %q; want failed with the script's reason", res.Outcome, res.Reason)
	}
	checkTraceFiles(t, home, res.SessionID, "failed")
}

// Config mistakes stop the CLI with exit 78 (ExitConfig) and a message naming the file and the key, before
// any mesh starts.
func TestCLIConfigErrors(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	env := cliEnv(t, home)
	cases := []struct {
		name, body string
		want       []string
	}{
		{"unknown-key.yaml", "agent:\n  name: x\n  colour: red\n", []string{"unknown-key.yaml:3", "agent.colour", "unknown key"}},
		{"wrong-type.yaml", "agent:\n  max_turns: lots\n", []string{"wrong-type.yaml:2", "agent.max_turns", "wrong type", "integer"}},
		{"no-script.yaml", "llm:\n  provider: scripted\n  model: scripted\n  script: missing.yaml\n", []string{"no-script.yaml", "llm.script", "missing.yaml"}},
		{"bad-yaml.yaml", "agent: [\n", []string{"bad-yaml.yaml:", "YAML"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, c.name), []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"run", "--config", c.name, "hi"}, {"up", "--config", c.name}} {
				r := skein(t, dir, env, "", args...)
				if r.code != protocol.ExitConfig {
					t.Errorf("%v: exit %d; want %d\n%s", args, r.code, protocol.ExitConfig, r)
				}
				for _, w := range c.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%v: stderr does not name %q:\n%s", args, w, r.stderr)
					}
				}
				if r.stdout != "" {
					t.Errorf("%v: stdout %q", args, r.stdout)
				}
			}
		})
	}
	if dirExists(home) {
		t.Errorf("a config error still created %s", home)
	}
}

// With the Anthropic provider and no key, run and up fail with one line naming the variable,
// before any service or NATS state exists.
func TestCLIMissingAPIKey(t *testing.T) {
	parent := t.TempDir()
	home := filepath.Join(parent, "home")
	// A clean environment: only what a shell must have.
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + parent, "SKEIN_HOME=" + home}
	dir := initProject(t, env)
	for _, args := range [][]string{
		{"run", "Greet Ada"},
		{"run", "--config", "agent.yaml", "--json", "Greet Ada"},
		{"up", "--listen", "127.0.0.1:0"},
	} {
		r := skein(t, dir, env, "", args...)
		if r.code != protocol.ExitConfig {
			t.Errorf("%v: exit %d; want %d\n%s", args, r.code, protocol.ExitConfig, r)
		}
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "ANTHROPIC_API_KEY") {
			t.Errorf("%v: stderr %q; want one line naming ANTHROPIC_API_KEY", args, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%v: stdout %q", args, r.stdout)
		}
	}
	if dirExists(home) || dirExists(filepath.Join(dir, ".skein")) {
		t.Errorf("a missing key still created mesh state")
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitForLine waits until a process's log holds want.
func waitForLine(t *testing.T, p *proc, want string) {
	t.Helper()
	poll.Eventually(t, time.Minute, fmt.Sprintf("%s to print %q", p.name, want), func() error {
		exited := p.exited() // before the read: what it printed before exiting is in the log
		if b, _ := os.ReadFile(p.log); strings.Contains(string(b), want) {
			return nil
		}
		if exited {
			t.Fatalf("%s exited before printing %q", p.name, want)
		}
		return fmt.Errorf("not in %s", p.log)
	})
}

// `skein up` runs the mesh for other processes: a run joins it with --nats, an extra executor
// serving another agent joins and does that agent's work, and SIGTERM stops up cleanly.
func TestCLIUpAndJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the CLI with an embedded mesh")
	}
	home := filepath.Join(t.TempDir(), "home")
	env := cliEnv(t, home)
	dir := initProject(t, env)
	addr := freePort(t)
	url := "nats://" + addr

	httpAddr := freePort(t)
	up := start(t, env, "skein-up", "skein", "up", "--listen", addr, "--http", httpAddr, "--config", filepath.Join(dir, "agent.offline.yaml"))
	waitForLine(t, up, "skein mesh up")
	// It says how to join it with the same binary and the config it was given (not agent.yaml).
	if b, _ := os.ReadFile(up.log); !strings.Contains(string(b), "skein up --roles executor --nats "+url+" --config "+filepath.Join(dir, "agent.offline.yaml")+"\n") {
		t.Errorf("up does not say how to join it:\n%s", b)
	}

	// A run without --nats on the same home must not open a second server on up's JetStream
	// files; it says which URL to pass instead.
	r := skein(t, dir, env, "", "run", "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if r.code == 0 || !strings.Contains(r.stderr, "--nats "+url) || r.stdout != "" {
		t.Errorf("embedded run on a home in use: want a failure naming --nats %s; %s", url, r)
	}

	r = skein(t, dir, env, "", "run", "--nats", url, "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("run --nats: %s", r)
	}
	first := parseRunJSON(t, r)
	if first.Outcome != "success_with_recovery" {
		t.Errorf("run --nats: %+v", first)
	}
	// A read-only command without --nats finds the mesh running on its home, through the
	// home's lock file, instead of refusing or opening the same files a second time.
	r = skein(t, dir, env, "", "trace", "list")
	if r.code != 0 || !strings.Contains(r.stdout, first.SessionID) {
		t.Errorf("trace list while up runs on the same home: %s", r)
	}
	// Authentication is on: from another home (no credentials there) the run is refused with one
	// line naming the fix, and --creds with the client file of up's home lets it in.
	stranger := cliEnv(t, filepath.Join(t.TempDir(), "elsewhere"))
	r = skein(t, dir, stranger, "", "run", "--nats", url, "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if r.code == 0 || !strings.Contains(r.stderr, "--creds") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Errorf("run without credentials: want one line naming --creds; %s", r)
	}
	r = skein(t, dir, stranger, "", "run", "--nats", url, "--creds", filepath.Join(home, "creds", "client.nk"), "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if r.code != 0 {
		t.Errorf("run --creds client.nk: %s", r)
	}
	if b, _ := os.ReadFile(up.log); !strings.Contains(string(b), filepath.Join(home, "creds")) {
		t.Errorf("up does not say where the credentials are:\n%s", b)
	}
	// $SKEIN_NATS_URL does the same as --nats.
	r = skein(t, dir, append(env, "SKEIN_NATS_URL="+url), "", "run", "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("run with SKEIN_NATS_URL: %s", r)
	}

	// An executor for an agent the up mesh does not serve joins as its own process.
	helper := filepath.Join(dir, "helper.yaml")
	body, err := os.ReadFile(filepath.Join(dir, "agent.offline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(helper, bytes.Replace(body, []byte("name: greeter"), []byte("name: helper"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	r = skein(t, dir, env, "", "run", "--nats", url, "--config", "helper.yaml", "--json", "Greet Ada")
	if r.code != protocol.ExitDataErr || !strings.Contains(r.stderr, `"helper"`) || !strings.Contains(r.stderr, "executor") {
		t.Errorf("run for an agent nobody serves: want exit %d (refused) saying how to start an executor; %s", protocol.ExitDataErr, r)
	}
	exec1 := start(t, env, "executor-helper", "executor", "--nats", url, "--config", helper)
	waitForLine(t, exec1, "executor ready") // it registers its agent before it says so
	r = skein(t, dir, env, "", "run", "--nats", url, "--config", "helper.yaml", "--json", "Greet Ada")
	if r.code != 0 {
		t.Fatalf("run for the joined executor's agent: %s", r)
	}
	res := parseRunJSON(t, r)
	if res.Outcome != "success_with_recovery" {
		t.Errorf("joined executor's run: %+v", res)
	}

	if b, _ := os.ReadFile(up.log); !strings.Contains(string(b), "Authorization: Bearer $(cat "+filepath.Join(home, "http.token")+")") {
		t.Errorf("up does not say where the HTTP token is:\n%s", b)
	}
	token, err := os.ReadFile(filepath.Join(home, "http.token"))
	if err != nil {
		t.Fatalf("up --http made no token file: %v", err)
	}
	checkHTTP(t, "http://"+httpAddr, strings.TrimSpace(string(token)))

	exec1.stop()
	up.stop()
	if code := up.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("skein up after SIGTERM: exit %d (%v); want 0", code, up.cmd.ProcessState)
	}
	if ws, ok := up.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("skein up was killed by %v; it should exit on SIGTERM by itself", ws.Signal())
	}
	if b, _ := os.ReadFile(up.log); strings.Contains(string(b), "panic") || strings.Contains(string(b), "DATA RACE") {
		t.Errorf("skein up log:\n%s", b)
	}
	// The state survives: an embedded run afterwards sees the sessions run against up.
	r = skein(t, dir, env, "", "trace", "list")
	// success or success_with_recovery: a case mined from an earlier run may show a later one
	// the right call first time.
	if r.code != 0 || !strings.Contains(r.stdout, res.SessionID) || strings.Count(r.stdout, " success") < 4 {
		t.Errorf("trace list after up stopped: %s", r)
	}
}

func TestCLIToonRoundTrip(t *testing.T) {
	dir := t.TempDir()
	env := cliEnv(t, filepath.Join(dir, "home"))
	in := `{"users":[{"id":1,"name":"Ada","admin":true},{"id":2,"name":"Bob, Jr.","admin":false}],"tags":["a","b c"],"note":"line\nbreak","empty":{},"n":null,"x":1.5}`
	enc := skein(t, dir, env, in, "toon", "encode")
	if enc.code != 0 || enc.stdout == "" {
		t.Fatalf("toon encode: %s", enc)
	}
	if strings.HasPrefix(strings.TrimSpace(enc.stdout), "{") {
		t.Errorf("toon encode printed JSON:\n%s", enc.stdout)
	}
	dec := skein(t, dir, env, enc.stdout, "toon", "decode")
	if dec.code != 0 {
		t.Fatalf("toon decode: %s", dec)
	}
	var want, got any
	if err := json.Unmarshal([]byte(in), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(dec.stdout), &got); err != nil {
		t.Fatalf("toon decode did not print JSON: %v\n%s", err, dec.stdout)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %v\nwant %v\nvia TOON:\n%s", got, want, enc.stdout)
	}
	if bad := skein(t, dir, env, "{not json", "toon", "encode"); bad.code == 0 || bad.stderr == "" {
		t.Errorf("toon encode of bad JSON: %s", bad)
	}
}

// checkHTTP submits through up's HTTP API and follows the session's events to their end.
func checkHTTP(t *testing.T, base, token string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/tasks", "application/json", strings.NewReader(`{"task": "Greet Ada"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /v1/tasks without the token: %d, want 401", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// send makes one request with the token.
	send := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp = send(http.MethodPost, "/v1/tasks", `{"task": "Greet Ada", "session_id": "via-http"}`)
	var rep map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || rep["session_id"] != "via-http" {
		t.Fatalf("POST /v1/tasks: %d %v", resp.StatusCode, rep)
	}
	resp = send(http.MethodGet, "/v1/sessions/via-http/events", "")
	body, err := io.ReadAll(resp.Body) // ends when the server closes the stream after usage
	resp.Body.Close()
	if err != nil {
		t.Fatalf("events stream did not end: %v", err)
	}
	var events []string
	for _, line := range strings.Split(string(body), "\n") {
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
		}
	}
	if len(events) < 3 || events[0] != "session_started" || events[len(events)-1] != "usage" || !strings.Contains(string(body), "Hello, Ada") {
		t.Errorf("events stream: %v", events)
	}
	resp = send(http.MethodGet, "/v1/sessions/via-http", "")
	var sess map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || sess["session_id"] != "via-http" || sess["task"] != "Greet Ada" {
		t.Errorf("GET /v1/sessions/via-http: %d %v", resp.StatusCode, sess)
	}
}
