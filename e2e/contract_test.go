package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/devenv"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/protocol/contract"
)

// pythonWithClient is the interpreter `make setup` installed the Python client into
// ($SKEIN_PYTHON, else the tools venv). Without it the test fails, saying how to install it.
func pythonWithClient(t *testing.T) string {
	t.Helper()
	py := os.Getenv("SKEIN_PYTHON")
	if py == "" {
		tools := os.Getenv("SKEIN_TOOLS_DIR")
		if tools == "" {
			tools = filepath.Join(devtest.RepoRoot(t), ".tools")
		}
		py = filepath.Join(tools, "venv", "bin", "python")
	}
	if out, err := exec.Command(py, "-c", "import skein_client").CombinedOutput(); err != nil {
		t.Fatalf("the Python client is not installed in %s (%v: %s): run `make setup` (or set SKEIN_PYTHON to a Python with `pip install ./clients/python`)", py, err, bytes.TrimSpace(out))
	}
	return py
}

// recorder keeps every message of the mesh (it subscribes to everything as admin) with, for a
// reply, the channel of the request it answers.
type recorder struct {
	mu      sync.Mutex
	msgs    []*nats.Msg
	replyTo map[string]string // inbox → request subject
}

func record(t *testing.T, url, home string) *recorder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, url, "contract-recorder", 15*time.Second, bus.WithCreds(auth.File(auth.Dir(home), auth.Admin)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := &recorder{replyTo: map[string]string{}}
	sub, err := c.NC.Subscribe(">", func(m *nats.Msg) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.msgs = append(r.msgs, m)
		if m.Reply != "" {
			r.replyTo[m.Reply] = m.Subject
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// check reads every recorded message of a documented channel with docs/asyncapi.json alone: the
// subject finds the channel, the Content-Type header or the document's msgpack rules give the
// JSON form, which must match one of the channel's messages. It returns how many messages each
// channel had.
func (r *recorder) check(t *testing.T, doc *contract.Document) map[string]int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]int{}
	for _, m := range r.msgs {
		channel, names := r.channel(doc, m)
		if channel == "" {
			continue
		}
		js := m.Data
		if !strings.HasPrefix(m.Header.Get(protocol.HeaderContentType), protocol.ContentTypeJSON) {
			var err error
			if js, err = contract.MsgpackToJSON(m.Data); err != nil {
				t.Errorf("%s: %v", m.Subject, err)
				continue
			}
		}
		var errs []string
		for _, name := range names {
			err := doc.ValidateJSON(name, js)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			t.Errorf("%s (channel %s) matches none of %v:\n%s\n%s", m.Subject, channel, names, strings.Join(errs, "\n"), js)
		}
		seen[channel]++
	}
	return seen
}

// channel is the documented channel a recorded message belongs to and the messages it may be,
// "" for what no channel documents. r.mu is held.
func (r *recorder) channel(doc *contract.Document, m *nats.Msg) (string, []string) {
	subject := m.Subject
	req, isReply := r.replyTo[m.Subject]
	if isReply {
		subject = req
	}
	channel, names := doc.Messages(subject)
	if channel == "" || len(m.Data) == 0 {
		return "", nil // JetStream API, deliveries to consumers, acks, heartbeats, bodiless refusals
	}
	if isReply && serviceKind(doc, channel) != "service" {
		return "", nil // the stream's publish acknowledgement, not a message of the channel
	}
	return channel, names
}

// missing is which of channels no recorded message belongs to yet.
func (r *recorder) missing(doc *contract.Document, channels []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, m := range r.msgs {
		if ch, _ := r.channel(doc, m); ch != "" {
			seen[ch] = true
		}
	}
	var out []string
	for _, ch := range channels {
		if !seen[ch] {
			out = append(out, ch)
		}
	}
	return out
}

// The Python client against a real mesh (`skein up`): its CLI prints the bytes `skein run --json`
// prints for the same session, its test suite passes, and every message the mesh carried
// meanwhile reads with docs/asyncapi.json alone.
func TestPythonClientAndContractOnARealMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a mesh and the Python client")
	}
	py := pythonWithClient(t)
	root := devtest.RepoRoot(t)
	home := filepath.Join(t.TempDir(), "home")
	env := cliEnv(t, home)
	dir := initProject(t, env)
	addr := freePort(t)
	url := "nats://" + addr
	httpAddr := freePort(t)
	up := start(t, env, "skein-up", "skein", "up", "--listen", addr, "--http", httpAddr, "--config", filepath.Join(dir, "agent.offline.yaml"))
	waitForLine(t, up, "skein mesh up")
	rec := record(t, url, home)

	// The client of this tree, not the copy `make setup` installed (its dependencies come from
	// there): the tests below are this tree's.
	pyEnv := append(env, "SKEIN_NATS_URL="+url, "SKEIN_TEST_AGENT=greeter", "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+filepath.Join(root, "clients", "python", "src"))
	runPy := func(args ...string) cliResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, args...)
		cmd.Dir, cmd.Env = dir, pyEnv
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
		if err != nil {
			res.code = cmd.ProcessState.ExitCode()
			if res.code == 0 {
				t.Fatalf("python %v: %v", args, err)
			}
		}
		return res
	}

	pyOut := runPy("-m", "skein_client", "submit", "--agent", "greeter", "--session-id", "py-1", "Greet Ada")
	if pyOut.code != 0 {
		t.Fatalf("python -m skein_client submit: %s", pyOut)
	}
	goOut := skein(t, dir, env, "", "run", "--nats", url, "--session-id", "py-1", "--config", "agent.offline.yaml", "--json", "Greet Ada")
	if goOut.code != 0 {
		t.Fatalf("skein run on the same session: %s", goOut)
	}
	if pyOut.stdout != goOut.stdout {
		t.Errorf("python -m skein_client submit printed\n%s\nskein run --json printed\n%s", pyOut.stdout, goOut.stdout)
	}
	if res := parseRunJSON(t, pyOut); !strings.HasPrefix(res.Outcome, "success") || res.SessionID != "py-1" { // with recovery, unless an earlier run's case showed the right call
		t.Errorf("python result %+v", res)
	}
	// Refusals exit 2 with the reason, like the CLI; no credentials names the fix.
	if r := runPy("-m", "skein_client", "submit", "--agent", "nobody", "Greet Ada"); r.code != 2 || !strings.Contains(r.stderr, `unknown agent "nobody"`) {
		t.Errorf("submit for an unknown agent: %s", r)
	}
	stranger := append(cliEnv(t, filepath.Join(t.TempDir(), "elsewhere")), "SKEIN_NATS_URL="+url, "PYTHONPATH="+filepath.Join(root, "clients", "python", "src"))
	cmd := exec.Command(py, "-m", "skein_client", "submit", "--agent", "greeter", "Greet Ada")
	cmd.Env = stranger
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--creds") {
		t.Errorf("submit without credentials: %v %s; want a failure naming --creds", err, out)
	}

	// Typed: the package passes mypy --strict.
	if r := runPy("-m", "mypy", "--strict", "--no-incremental", filepath.Join(root, "clients", "python", "src", "skein_client")); r.code != 0 {
		t.Errorf("mypy --strict clients/python: %s", r)
	}

	suite := runPy("-m", "unittest", "discover", "-v", "-s", filepath.Join(root, "clients", "python", "tests"))
	if suite.code != 0 || !strings.Contains(suite.stderr, "OK") || strings.Contains(suite.stderr, "skipped") {
		t.Errorf("Python client tests: %s", suite)
	}

	// The README's examples run in TestDocsExamples.

	checkHTTPAgainstOpenAPI(t, root, "http://"+httpAddr, home, "py-1")
	checkNATSCLI(t, url, home)

	raw, err := os.ReadFile(filepath.Join(root, "docs", "asyncapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := contract.ReadDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	// The last messages may still be on their way to the recorder: wait until every channel the
	// run used has one, then read them all.
	used := []string{"submit", "cancel", "task", "work", "result", "trace", "delta", "usage", "tool", "memory.retrieve", "memory.list", "kv.sessions"}
	if err := poll.Wait(30*time.Second, func() error {
		if missing := rec.missing(doc, used); len(missing) > 0 {
			return fmt.Errorf("nothing recorded on %v", missing)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	seen := rec.check(t, doc)
	t.Logf("messages read with docs/asyncapi.json alone, per channel: %v", seen)
}

// checkHTTPAgainstOpenAPI reads a finished session over HTTP (its record, its tree, its event
// stream) and checks each answer with docs/openapi.json alone.
func checkHTTPAgainstOpenAPI(t *testing.T, root, base, home, session string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := contract.ReadDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(home, "http.token"))
	if err != nil {
		t.Fatal(err)
	}
	// schemas names the schema of an answer: one, or each of a oneOf (an event stream that
	// carries two kinds of event).
	schemas := func(path, contentType string) []string {
		op, _ := doc.Raw()["paths"].(map[string]any)[path].(map[string]any)["get"].(map[string]any)
		rs, _ := op["responses"].(map[string]any)["200"].(map[string]any)
		c, _ := rs["content"].(map[string]any)[contentType].(map[string]any)
		s, _ := c["schema"].(map[string]any)
		if strings.HasSuffix(contentType, "event-stream") { // each event's object: its data's schema
			data, _ := s["properties"].(map[string]any)["data"].(map[string]any)
			s, _ = data["contentSchema"].(map[string]any)
		}
		refs := []any{s}
		if one, ok := s["oneOf"].([]any); ok {
			refs = one
		}
		var names []string
		for _, r := range refs {
			m, _ := r.(map[string]any)
			if ref, _ := m["$ref"].(string); ref != "" {
				names = append(names, strings.TrimPrefix(ref, contract.SchemaRef))
			}
		}
		if len(names) == 0 {
			t.Fatalf("docs/openapi.json: GET %s 200 %s has no schema", path, contentType)
		}
		return names
	}
	get := func(path string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return resp, body
	}
	for path, tmpl := range map[string]string{"/v1/sessions/" + session: "/v1/sessions/{id}", "/v1/sessions/" + session + "/tree": "/v1/sessions/{id}/tree"} {
		_, body := get(path)
		if err := doc.ValidateJSON(schemas(tmpl, "application/json")[0], body); err != nil {
			t.Errorf("GET %s read with docs/openapi.json: %v\n%s", path, err, body)
		}
	}
	_, body := get("/v1/sessions/" + session + "/events")
	names, n := schemas("/v1/sessions/{id}/events", "text/event-stream"), 0
	for _, line := range strings.Split(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			n++
			var errs []string
			for _, name := range names {
				if err := doc.ValidateJSON(name, []byte(data)); err != nil {
					errs = append(errs, err.Error())
				}
			}
			if len(errs) == len(names) {
				t.Errorf("event read with docs/openapi.json matches none of %v: %s\n%s", names, strings.Join(errs, "; "), data)
			}
		}
	}
	if n < 5 {
		t.Errorf("the event stream of %s had %d events:\n%s", session, n, body)
	}
}

// checkNATSCLI submits a task with the nats CLI (natscli, mk/nats-cli.mk) and the client
// credentials file as skein wrote it: `--nkey FILE` reads it as it is.
func checkNATSCLI(t *testing.T, url, home string) {
	t.Helper()
	natsCLI := filepath.Join(devenv.ToolsDir(), "bin", "nats")
	if _, err := os.Stat(natsCLI); err != nil {
		devtest.Missing(t, "the nats CLI (mk/nats-cli.mk)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, natsCLI, "--server", url, "--nkey", auth.File(auth.Dir(home), auth.Client),
		"--inbox-prefix", auth.InboxPrefix(auth.Client), "req", "skein.gateway.submit",
		`{"v":1,"task":"Greet Ada","agent":"greeter"}`, "-H", "Content-Type:application/json").Output()
	var rep protocol.SubmitReply
	if err != nil || json.Unmarshal(bytes.TrimSpace(out), &rep) != nil || rep.SessionID == "" || rep.Error != "" {
		t.Errorf("nats req with --nkey %s: %v\n%s", auth.File(auth.Dir(home), auth.Client), err, out)
	}
}

// serviceKind is the document's x-skein.kind of a channel.
func serviceKind(doc *contract.Document, channel string) string {
	ch, _ := doc.Raw()["channels"].(map[string]any)[channel].(map[string]any)
	ext, _ := ch["x-skein"].(map[string]any)
	kind, _ := ext["kind"].(string)
	return kind
}
