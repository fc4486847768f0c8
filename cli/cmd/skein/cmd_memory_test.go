package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// memMesh is a test mesh with memoryd (hash embedder, KV store) and no other service.
func memMesh(t *testing.T) *bustest.Mesh {
	t.Helper()
	m := bustest.Start(t)
	ready := make(chan struct{})
	roles := bustest.RunRoles(t, m)
	roles.GoReady("memoryd", ready, func(ctx context.Context) error {
		return memoryd.Run(ctx, memoryd.Deps{Conn: roles.Connect("memoryd"), Names: m.Names, Config: config.Default(),
			Embedder: embedtest.Hash{}, Ready: ready})
	})
	t.Chdir(t.TempDir()) // no agent.yaml: defaults
	return m
}

func runCLI(t *testing.T, m *bustest.Mesh, args ...string) (string, error) {
	t.Helper()
	out, _, err := runSkein(t, time.Minute, nil, append([]string{"--nats", m.URL}, args...)...)
	return out, err
}

func TestMemoryCommandsRoundTrip(t *testing.T) {
	m := memMesh(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	lines := []string{
		`{"agent":"demo","text":"Check the csv path exists before csv_read.","polarity":"avoid","tier":"strategic","tools":["csv_read"],"sessions":["a","b","c"]}`,
		`# comments and blank lines are ignored`,
		``,
		`{"agent":"demo","text":"List files, then read them with csv_read.","polarity":"pattern","tools":["list_files","csv_read"]}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, m, "memory", "import", in)
	if err != nil || !strings.Contains(out, "imported 2, skipped 0") {
		t.Fatalf("import: %q %v", out, err)
	}
	out, err = runCLI(t, m, "inspect-memory", "check the csv path", "--top-k", "1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"strategic 1  tactical 1", "top 1 for", "ranked as retrieval ranks", "Check the csv path exists", "[csv_read]", "sessions 3", "why: similarity", "imported"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect-memory lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, m, "inspect-memory", "--tier", "tactical")
	if err != nil || !strings.Contains(out, "List files") || strings.Contains(out, "Check the csv") {
		t.Fatalf("inspect --tier: %q %v", out, err)
	}
	if _, err := runCLI(t, m, "inspect-memory", "--tier", "bogus"); err == nil {
		t.Fatal("bad tier accepted")
	}

	exp := filepath.Join(dir, "out.jsonl")
	if _, err := runCLI(t, m, "memory", "export", exp); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(exp)
	rows := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(rows) != 2 {
		t.Fatalf("export: %q", data)
	}
	var first struct {
		ID        string    `json:"id"`
		Embedding []float32 `json:"embedding"`
	}
	if err := json.Unmarshal([]byte(rows[0]), &first); err != nil || first.ID == "" || first.Embedding != nil {
		t.Fatalf("export row %q: %v", rows[0], err)
	}
	out, err = runCLI(t, m, "memory", "show", first.ID)
	if err != nil || !strings.Contains(out, first.ID) {
		t.Fatalf("show: %q %v", out, err)
	}
	if _, err := runCLI(t, m, "memory", "show", "nope"); err == nil {
		t.Fatal("show of a missing id succeeded")
	}
	out, err = runCLI(t, m, "memory", "import", exp)
	if err != nil || !strings.Contains(out, "imported 0, skipped 2") {
		t.Fatalf("re-import: %q %v", out, err)
	}
	out, err = runCLI(t, m, "memory", "list")
	if err != nil || strings.Count(out, "\n") != 2 {
		t.Fatalf("list: %q %v", out, err)
	}
	out, err = runCLI(t, m, "memory", "evict", "--dry-run")
	if err != nil || !strings.Contains(out, "would evict 0 entries") {
		t.Fatalf("evict: %q %v", out, err)
	}
	out, err = runCLI(t, m, "memory", "migrate")
	if err != nil || !strings.Contains(out, "re-embedded 2 entries") {
		t.Fatalf("migrate: %q %v", out, err)
	}
	// The KV store has no index apart from its records (the Milvus case: memoryd's tests).
	out, err = runCLI(t, m, "memory", "repair")
	if err != nil || !strings.Contains(out, "memory store kv: nothing to repair") {
		t.Fatalf("repair: %q %v", out, err)
	}
	out, err = runCLI(t, m, "memory", "repair", "--json")
	if err != nil || !strings.Contains(out, `"repaired": false`) || !strings.Contains(out, `"store": "kv"`) {
		t.Fatalf("repair --json: %q %v", out, err)
	}
}

// An export is readable by its owner only, also when it replaces a file others could read.
func TestMemoryExportIsPrivate(t *testing.T) {
	m := memMesh(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"agent":"demo","text":"Check the csv path exists before csv_read.","polarity":"avoid","tools":["csv_read"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, m, "memory", "import", in); err != nil || !strings.Contains(out, "imported 1") {
		t.Fatalf("import: %q %v", out, err)
	}
	fresh, old := filepath.Join(dir, "fresh.jsonl"), filepath.Join(dir, "old.jsonl")
	if err := os.WriteFile(old, []byte("an older, longer file that others could read\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, p := range []string{fresh, old} {
		if _, err := runCLI(t, m, "memory", "export", p); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", filepath.Base(p), st.Mode().Perm(), err)
		}
		data, _ := os.ReadFile(p)
		if !strings.Contains(string(data), "Check the csv path") || strings.Contains(string(data), "older") {
			t.Errorf("%s holds %q, want the export alone", filepath.Base(p), data)
		}
	}
}

// inspect-memory and memory list say who wrote each entry: mined, a sub-agent (which, in which
// session), the agent's own remember, imported.
func TestMemoryCommandsShowTheSource(t *testing.T) {
	m := memMesh(t)
	c := memoryd.Client{NC: m.Conn.NC, Names: m.Names}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, req := range []protocol.RememberRequest{
		{Agent: "boss", SessionID: "a-child7", Source: protocol.SourceSubagent, SourceAgent: "scout",
			Notes: []protocol.RememberNote{{Text: "The vault code for Peru is 4417."}}},
		{Agent: "boss", SessionID: "s-own3", Source: protocol.SourceRemembered,
			Notes: []protocol.RememberNote{{Text: "Billing deploys go out on Tuesdays."}}},
	} {
		if _, err := c.Remember(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Ingest(ctx, protocol.IngestRequest{Agent: "boss", SessionID: "s-mined", Candidates: []protocol.Candidate{
		{Text: "Call lookup with a country code.", Polarity: protocol.PolarityAvoid, Key: "k"}}}); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, m, "inspect-memory", "--top-k", "5")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"subagent scout (session a-child7)", "remembered (session s-own3)", "mined"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect-memory lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, m, "memory", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		want := map[bool]string{true: "subagent", false: ""}[strings.Contains(line, "4417")]
		if strings.Contains(line, "Tuesdays") {
			want = "remembered"
		}
		if strings.Contains(line, "country code") {
			want = "mined"
		}
		if !strings.Contains(line, " "+want+" ") {
			t.Errorf("memory list line %q does not say %q", line, want)
		}
	}
}

func TestIngestTracesAndReplayCommands(t *testing.T) {
	m := memMesh(t)
	pub := trace.NewPublisher(m.Conn.JS, m.Names, "test")
	for _, ev := range []protocol.Event{
		{Type: protocol.EvSessionStarted, Agent: "demo", Task: "read /data/x.csv"},
		{Type: protocol.EvToolCall, Tool: "csv_read", Args: json.RawMessage(`{"path":"/data/x.csv"}`),
			Result: &protocol.ToolResult{Kind: protocol.ToolErrToolError, Error: "no such file: /data/x.csv"}},
		{Type: protocol.EvFinal, Outcome: protocol.OutcomeIncompleteToolFail},
		{Type: protocol.EvUsage, Report: &protocol.UsageReport{}},
	} {
		ev.SessionID = "s-1"
		if err := pub.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, m, "ingest-traces", "s-1")
	if err != nil || !strings.Contains(out, "added") || !strings.Contains(out, "no such file: /data/x.csv") {
		t.Fatalf("ingest-traces: %q %v", out, err)
	}
	out, err = runCLI(t, m, "replay", "--since", "1h")
	if err != nil || !strings.Contains(out, "skipped") || !strings.Contains(out, "[1/1] session ") || !strings.Contains(out, "replayed 1 sessions") {
		t.Fatalf("replay: %q %v", out, err)
	}
	if _, err := runCLI(t, m, "replay"); err == nil {
		t.Fatal("replay without a range succeeded")
	}
	if _, err := runCLI(t, m, "ingest-traces", "missing"); err == nil {
		t.Fatal("ingest-traces of a missing session succeeded")
	}
}

func TestImportFileRefusesUnknownFields(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in.jsonl")
	body := `{"agent":"demo","text":"ok","polarity":"avoid"}` + "\n" + `{"agent":"demo","text":"x","polarity":"avoid","teir":"strategic"}` + "\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := readJSONL(p)
	if err == nil || !strings.Contains(err.Error(), ":2:") || !strings.Contains(err.Error(), "teir") {
		t.Fatalf("want an error naming line 2 and the field, got %v", err)
	}
}

// A large import reports each batch sent, so the user sees it progress.
func TestMemoryImportShowsProgress(t *testing.T) {
	m := memMesh(t)
	in := filepath.Join(t.TempDir(), "in.jsonl")
	var lines []string
	for i := range 150 {
		lines = append(lines, fmt.Sprintf(`{"agent":"demo","text":"Guideline number %d about csv files.","polarity":"avoid"}`, i))
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runSkein(t, time.Minute, nil, "--nats", m.URL, "memory", "import", in)
	if err != nil || !strings.Contains(out, "imported 150") {
		t.Fatalf("import: %q %v", out, err)
	}
	if !strings.Contains(errOut, "import: 100/150 entries sent") {
		t.Errorf("no progress on stderr: %q", errOut)
	}
}

// inspect-memory shows what happened to a rule: its history under every hit, and with --id one
// entry's whole history and the entries it replaced or was replaced by.
func TestInspectMemoryShowsARulesHistory(t *testing.T) {
	m := memMesh(t)
	in := filepath.Join(t.TempDir(), "in.jsonl")
	lines := []string{
		`{"id":"never1","agent":"demo","text":"Never pass ISO dates to report_tool.","polarity":"avoid","tier":"strategic","tools":["report_tool"],"sessions":["b1","b2","b3","b4","b5"],` +
			`"supersedes":["always1"],"history":[{"at":"2026-03-01T10:00:00Z","event":"superseded","other":"always1","reason":"evidence 8 vs 10"},` +
			`{"at":"2026-03-02T10:00:00Z","event":"supersedes","other":"always1","reason":"judged contradiction (report_tool changed its date format); evidence 17 vs 16"}]}`,
		`{"id":"always1","agent":"demo","text":"Always pass dates to report_tool as ISO dates.","polarity":"pattern","tier":"strategic","status":"superseded","superseded_by":"never1",` +
			`"tools":["report_tool"],"sessions":["a1"],"history":[{"at":"2026-03-02T10:00:00Z","event":"superseded","other":"never1","reason":"evidence 17 vs 16"}]}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, m, "memory", "import", in); err != nil || !strings.Contains(out, "imported 2") {
		t.Fatalf("import: %q %v", out, err)
	}
	out, err := runCLI(t, m, "inspect-memory", "report dates")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "2026-03-02T10:00:00Z  supersedes always1: judged contradiction") || !strings.Contains(out, "utility +0.00") {
		t.Errorf("inspect-memory does not show the history:\n%s", out)
	}
	out, err = runCLI(t, m, "inspect-memory", "--id", "always1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"always1  superseded strategic pattern", "2026-03-02T10:00:00Z  superseded never1: evidence 17 vs 16",
		"superseded by never1 (active strategic): Never pass ISO dates"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect-memory --id lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCLI(t, m, "inspect-memory", "--id", "nope"); err == nil {
		t.Error("--id of a missing entry did not fail")
	}
}
