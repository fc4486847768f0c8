package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// These tests hold the `--json` output of each command to the shape docs/json.md documents:
// one JSON document on stdout, with exactly the documented fields (a new field must be
// documented first).

// jsonObject decodes one JSON object and checks its field names: every one of always, and
// nothing outside always and maybe.
func jsonObject(t *testing.T, what string, data []byte, always, maybe []string) map[string]json.RawMessage {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatalf("%s: not one JSON object: %v\n%s", what, err, data)
	}
	for _, k := range always {
		if _, ok := obj[k]; !ok {
			t.Errorf("%s: no field %q in %s", what, k, data)
		}
	}
	for k := range obj {
		if !slices.Contains(always, k) && !slices.Contains(maybe, k) {
			t.Errorf("%s: undocumented field %q in %s", what, k, data)
		}
	}
	return obj
}

// jsonArray decodes a JSON array (never null).
func jsonArray(t *testing.T, what string, data []byte) []json.RawMessage {
	t.Helper()
	var arr []json.RawMessage
	if err := json.Unmarshal(data, &arr); err != nil || arr == nil {
		t.Fatalf("%s: not a JSON array: %v\n%s", what, err, data)
	}
	return arr
}

var entryFields = []string{"id", "text", "polarity", "tier", "agent", "tools", "sessions", "session_count", "hits", "helpful",
	"harmful", "model", "source", "source_agent", "source_session", "status", "superseded_by", "mined", "created", "updated", "last_used"}

func TestMemoryCommandsJSON(t *testing.T) {
	m := memMesh(t)
	in := filepath.Join(t.TempDir(), "in.jsonl")
	body := `{"agent":"demo","text":"Check the csv path exists before csv_read.","polarity":"avoid","tier":"strategic","tools":["csv_read"],"sessions":["a"]}
{"agent":"demo","text":"List files, then read them with csv_read.","polarity":"pattern","tools":["list_files","csv_read"]}
`
	if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, m, "memory", "import", "--json", in)
	if err != nil {
		t.Fatal(err)
	}
	imp := jsonObject(t, "memory import", []byte(out), []string{"imported", "skipped", "problems"}, nil)
	if string(imp["imported"]) != "2" || string(imp["problems"]) != "[]" {
		t.Fatalf("memory import --json: %s", out)
	}

	out, err = runCLI(t, m, "memory", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	list := jsonArray(t, "memory list", []byte(out))
	if len(list) != 2 {
		t.Fatalf("memory list --json: %d entries, want 2", len(list))
	}
	for _, e := range list {
		jsonObject(t, "memory list entry", e, []string{"id", "text", "polarity", "tier", "agent", "status", "created", "updated"}, entryFields)
	}

	out, err = runCLI(t, m, "inspect-memory", "--json", "check the csv path")
	if err != nil {
		t.Fatal(err)
	}
	ins := jsonObject(t, "inspect-memory", []byte(out), []string{"v", "model", "at", "counts"}, []string{"hits"})
	var counts, hits []json.RawMessage
	if json.Unmarshal(ins["counts"], &counts) != nil || len(counts) == 0 || json.Unmarshal(ins["hits"], &hits) != nil || len(hits) == 0 {
		t.Fatalf("inspect-memory --json: no counts or hits: %s", out)
	}
	jsonObject(t, "inspect-memory count", counts[0], []string{"agent", "tier", "status", "n"}, nil)
	hit := jsonObject(t, "inspect-memory hit", hits[0], []string{"entry", "score"}, []string{"similarity", "why"})
	jsonObject(t, "inspect-memory hit entry", hit["entry"], []string{"id", "text"}, entryFields)

	out, err = runCLI(t, m, "memory", "evict", "--dry-run", "--json")
	if err != nil {
		t.Fatal(err)
	}
	ev := jsonObject(t, "memory evict", []byte(out), []string{"v", "evicted", "dry_run", "capacity"}, nil)
	if string(ev["evicted"]) != "[]" || string(ev["dry_run"]) != "true" {
		t.Fatalf("memory evict --json: %s", out)
	}

	out, err = runCLI(t, m, "memory", "migrate", "--json")
	if err != nil {
		t.Fatal(err)
	}
	mig := jsonObject(t, "memory migrate", []byte(out), []string{"v", "reembedded", "from", "model"}, nil)
	if string(mig["reembedded"]) != "2" {
		t.Fatalf("memory migrate --json: %s", out)
	}
}

var minedFields = []string{"session", "agent", "outcome", "candidates", "actions", "feedback", "usage"}

// minedOptional are the fields mining prints when it has them: the session's cases, and the
// episodes that got none.
var minedOptional = []string{"cases", "case_skips"}

func TestTraceUsageAndMiningCommandsJSON(t *testing.T) {
	m := memMesh(t)
	report := &protocol.UsageReport{Usage: protocol.Usage{InputTokens: 120, OutputTokens: 7}}
	evs := []protocol.Event{
		{Type: protocol.EvSessionStarted, Agent: "demo", Task: "read /data/x.csv"},
		{Type: protocol.EvToolCall, Tool: "csv_read", Args: json.RawMessage(`{"path":"/data/x.csv"}`),
			Result: &protocol.ToolResult{Kind: protocol.ToolErrToolError, Error: "no such file: /data/x.csv"}},
		{Type: protocol.EvFinal, Outcome: protocol.OutcomeIncompleteToolFail},
		{Type: protocol.EvUsage, Agent: "demo", Outcome: protocol.OutcomeIncompleteToolFail, Report: report},
	}
	sessiontest.Publish(t, m.Conn, m.Names, "s-1", evs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	usage := protocol.Event{SessionID: "s-1", Type: protocol.EvUsage, Agent: "demo", Report: report, Time: time.Now().UTC()}
	data, err := protocol.Marshal(&usage)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Conn.JS.Publish(ctx, m.Names.Usage("demo"), data, jetstream.WithMsgID("s-1")); err != nil {
		t.Fatal(err)
	}

	out, err := runCLI(t, m, "trace", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	sessions := jsonArray(t, "trace list", []byte(out))
	if len(sessions) != 1 {
		t.Fatalf("trace list --json: %s", out)
	}
	s := jsonObject(t, "trace list item", sessions[0], []string{"session_id", "agent", "task", "outcome", "started", "events"}, nil)
	if string(s["session_id"]) != `"s-1"` || string(s["outcome"]) != `"incomplete_with_tool_failure"` || string(s["events"]) != "4" {
		t.Fatalf("trace list --json: %s", out)
	}

	// trace show --json prints JSON lines, one event each.
	out, err = runCLI(t, m, "trace", "show", "--json", "s-1")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(evs) {
		t.Fatalf("trace show --json: %d lines for %d events:\n%s", len(lines), len(evs), out)
	}
	eventFields := []string{"v", "session_id", "type", "time", "agent", "step_id", "role", "source", "task", "plan", "turn", "text",
		"outcome", "reason", "model", "provider", "stop_reason", "usage", "latency_ms", "tool", "call_id", "args", "result",
		"tools", "guidelines", "tokens_saved", "report", "mined", "ingested", "attrs"}
	for i, l := range lines {
		ev := jsonObject(t, "trace show line", []byte(l), []string{"v", "session_id", "type", "time"}, eventFields)
		if string(ev["type"]) != `"`+string(evs[i].Type)+`"` {
			t.Errorf("line %d is a %s event, want %s", i, ev["type"], evs[i].Type)
		}
	}

	for _, by := range []string{"agent", "model"} {
		out, err = runCLI(t, m, "usage", "--json", "--by", by)
		if err != nil {
			t.Fatal(err)
		}
		u := jsonObject(t, "usage", []byte(out), []string{"by", "rows"}, nil)
		var rows []json.RawMessage
		if err := json.Unmarshal(u["rows"], &rows); err != nil {
			t.Fatal(err)
		}
		if by == "agent" {
			if len(rows) != 1 {
				t.Fatalf("usage --json: %s", out)
			}
			r := jsonObject(t, "usage row", rows[0], []string{"key", "sessions", "input_tokens", "output_tokens",
				"cache_creation_input_tokens", "cache_read_input_tokens", "cost_usd", "cost_complete"}, nil)
			if string(r["key"]) != `"demo"` || string(r["sessions"]) != "1" || string(r["input_tokens"]) != "120" {
				t.Fatalf("usage --json: %s", out)
			}
		} else if string(u["by"]) != `"model"` || len(rows) != 0 {
			t.Fatalf("usage --json --by model (no model calls): %s", out)
		}
	}

	out, err = runCLI(t, m, "ingest-traces", "--json", "s-1")
	if err != nil {
		t.Fatal(err)
	}
	mined := jsonObject(t, "ingest-traces", []byte(out), minedFields, minedOptional)
	var cands []json.RawMessage
	if string(mined["session"]) != `"s-1"` || json.Unmarshal(mined["candidates"], &cands) != nil || len(cands) != 1 {
		t.Fatalf("ingest-traces --json: %s", out)
	}

	out, err = runCLI(t, m, "replay", "--json", "--since", "1h")
	if err != nil {
		t.Fatal(err)
	}
	rep := jsonObject(t, "replay", []byte(out), []string{"replayed", "sessions"}, nil)
	var replayed []json.RawMessage
	if string(rep["replayed"]) != "1" || json.Unmarshal(rep["sessions"], &replayed) != nil || len(replayed) != 1 {
		t.Fatalf("replay --json: %s", out)
	}
	jsonObject(t, "replay session", replayed[0], minedFields, minedOptional)
}

// mesh apply --json lists the differences it changed (or, with --dry-run, would change).
func TestMeshApplyJSON(t *testing.T) {
	m := bustest.Start(t)
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := m.Names.Stream(protocol.StreamDLQ)
	s, err := m.Conn.JS.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	want := cfg.MaxMsgs
	cfg.MaxMsgs = 12345
	if _, err := m.Conn.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		args := []string{"mesh", "apply", "--json"}
		if dry {
			args = append(args, "--dry-run")
		}
		out, err := runCLI(t, m, args...)
		if err != nil {
			t.Fatal(err)
		}
		obj := jsonObject(t, "mesh apply", []byte(out), []string{"dry_run", "changes"}, nil)
		changes := jsonArray(t, "mesh apply changes", obj["changes"])
		if string(obj["dry_run"]) != map[bool]string{true: "true", false: "false"}[dry] || len(changes) != 1 {
			t.Fatalf("mesh apply --json (dry run %v): %s", dry, out)
		}
		c := jsonObject(t, "mesh apply change", changes[0], []string{"resource", "field", "have", "want"}, nil)
		if string(c["field"]) != `"max_msgs"` || string(c["have"]) != `"12345"` {
			t.Fatalf("mesh apply --json change: %s", changes[0])
		}
	}
	out, err := runCLI(t, m, "mesh", "apply", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if obj := jsonObject(t, "mesh apply", []byte(out), []string{"dry_run", "changes"}, nil); string(obj["changes"]) != "[]" {
		t.Fatalf("after apply, mesh apply --json still finds changes: %s (want max_msgs %d)", out, want)
	}
}
