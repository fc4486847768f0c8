package gateway_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/gateway/gatewaytest"
	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The gateway's HTTP API with a real memoryd beside it, on a real NATS: the routes that read
// memory and the event stream that waits for the miner's usage when memoryd answers. The
// gateway's other HTTP tests are in its own module.

const testAgent = "greeter"

type fixture struct {
	mesh *bustest.Mesh
	srv  *httptest.Server
}

// newFixture serves a gateway's HTTP API for one registered agent.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	m := bustest.Start(t)
	cfg := config.Default()
	cfg.Agent.Name = testAgent
	gw, err := gateway.New(testCtx(t), gateway.Deps{Conn: m.Conn, Names: m.Names, Config: cfg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), HTTPToken: gatewaytest.Token})
	if err != nil {
		t.Fatal(err)
	}
	bustest.RegisterAgent(t, m.Conn, m.Names, protocol.AgentSpec{Name: testAgent, MaxSteps: 5, MaxDepth: 2})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	return &fixture{mesh: m, srv: srv}
}

// startMemoryd runs memoryd (with a hash embedder) until the test ends and returns a client.
func startMemoryd(t *testing.T, m *bustest.Mesh) memoryd.Client {
	t.Helper()
	ready := make(chan struct{})
	roles := bustest.RunRoles(t, m)
	roles.GoReady("memoryd", ready, func(ctx context.Context) error {
		return memoryd.Run(ctx, memoryd.Deps{Conn: roles.Connect("memoryd"), Names: m.Names, Config: config.Default(),
			Embedder: embedtest.Hash{}, Ready: ready})
	})
	return memoryd.Client{NC: m.Conn.NC, Names: m.Names}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func postTask(t *testing.T, srv *httptest.Server, body string) (int, map[string]any) {
	t.Helper()
	var out map[string]any
	return gatewaytest.PostJSON(t, srv, "/v1/tasks", body, &out), out
}

// With a miner at work (memoryd up, mining on), the stream goes on past the planner's usage
// and ends with the miner's mined and usage events, the session's last.
func TestHTTPEventsEndWithTheMinersUsage(t *testing.T) {
	f := newFixture(t)
	startMemoryd(t, f.mesh)
	srv := f.srv
	if status, out := postTask(t, srv, `{"task": "Greet Ada", "session_id": "sse-2"}`); status != http.StatusAccepted {
		t.Fatalf("status %d %v", status, out)
	}
	resp, err := gatewaytest.Client.Get(srv.URL + "/v1/sessions/sse-2/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cost := 0.0
	sessiontest.Publish(t, f.mesh.Conn, f.mesh.Names, "sse-2",
		protocol.Event{Type: protocol.EvFinal, Outcome: protocol.OutcomeSuccess, Text: "Hello, Ada!"},
		protocol.Event{Type: protocol.EvUsage, Role: protocol.RolePlanner, Report: &protocol.UsageReport{CostUSD: &cost}},
		protocol.Event{Type: protocol.EvMined, Role: protocol.RoleMiner},
		protocol.Event{Type: protocol.EvUsage, Role: protocol.RoleMiner, Report: &protocol.UsageReport{CostUSD: &cost}},
		protocol.Event{Type: protocol.EvFinal, Text: "after the end"})
	var types []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "event: ") {
			types = append(types, strings.TrimPrefix(line, "event: "))
		}
	}
	want := "session_started,final,usage,mined,usage"
	if got := strings.Join(types, ","); got != want {
		t.Errorf("events %s; want %s", got, want)
	}
}

// The memory routes list, search, retire and evict what memoryd holds.
func TestHTTPMemory(t *testing.T) {
	f := newFixture(t)
	srv := f.srv
	c := startMemoryd(t, f.mesh)
	var e map[string]string
	now := time.Now().UTC()
	entries := []memory.Entry{
		{ID: "m-1", Agent: testAgent, Text: "Check the CSV file exists before reading it.", Polarity: protocol.PolarityAvoid, Tier: protocol.TierTactical,
			Sessions: []string{"s1"}, Source: "human", Status: memory.StatusActive, Created: now, Updated: now},
		{ID: "m-2", Agent: testAgent, Text: "Greet people by name.", Polarity: protocol.PolarityPattern, Tier: protocol.TierStrategic,
			Sessions: []string{"s1", "s2", "s3"}, Helpful: 2, Source: "human", Status: memory.StatusActive, Created: now, Updated: now},
	}
	skill := memory.Entry{ID: "k-1", Agent: testAgent, Kind: memory.KindSkill, Text: "Export a report: open the store, query it, write the file.",
		Polarity: protocol.PolarityPattern, Tier: protocol.TierTactical, Source: "human", Status: memory.StatusActive, Created: now, Updated: now,
		Skill: &protocol.SkillBody{Name: "export-report", Version: 1, Maturity: protocol.SkillMature, Confidence: 0.8, Confirmed: 3,
			Steps: []protocol.SkillStep{{Tool: "db_open", Text: "open the store"}, {Tool: "db_query", Text: "query it"}}, Signature: []string{"db_open", "db_query"}}}
	if rep, err := c.Import(testCtx(t), protocol.MemoryImportRequest{Entries: append(entries, skill)}); err != nil || rep.Imported != 3 {
		t.Fatalf("import: %+v %v", rep, err)
	}

	var list protocol.MemoryListReply
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory?agent="+testAgent, &list); status != http.StatusOK || list.Total != 2 || list.Entries[0].ID != "m-2" {
		t.Fatalf("list (guidelines, as before kinds): %d %+v", status, list)
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory?kind=skill", &list); status != http.StatusOK || list.Total != 1 || list.Entries[0].Skill == nil || list.Entries[0].Skill.Name != "export-report" {
		t.Fatalf("list kind=skill: %d %+v", status, list)
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory?kind=all", &list); status != http.StatusOK || list.Total != 3 {
		t.Fatalf("list kind=all: %d %+v", status, list)
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory?kind=rule", &e); status != http.StatusBadRequest {
		t.Errorf("bad kind: %d %v", status, e)
	}
	var kinds protocol.MemoryInspectReply
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory/search?q=export+a+report&kind=skill&top_k=5", &kinds); status != http.StatusOK || len(kinds.Hits) != 1 || kinds.Hits[0].Entry.ID != "k-1" {
		t.Fatalf("search kind=skill: %d %+v", status, kinds)
	}
	var ins protocol.MemoryInspectReply
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory/search?q=read+the+csv+file&top_k=1", &ins); status != http.StatusOK || len(ins.Hits) != 1 ||
		ins.Hits[0].Entry.ID != "m-1" || ins.Hits[0].Why == "" || len(ins.Counts) != 3 {
		t.Fatalf("search: %d %+v", status, ins)
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory/search?tier=middle", &e); status != http.StatusBadRequest {
		t.Errorf("bad tier: %d %v", status, e)
	}

	var ret protocol.MemoryRetireReply
	if status := gatewaytest.PostJSON(t, srv, "/v1/memory/m-1/retire", `{"reason": "wrong"}`, &ret); status != http.StatusOK || ret.Status != protocol.MemoryRetired {
		t.Fatalf("retire: %d %+v", status, ret)
	}
	var got memory.Entry
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory/m-1", &got); status != http.StatusOK || got.Status != protocol.MemoryRetired {
		t.Fatalf("retired entry: %d %+v", status, got)
	}
	if gatewaytest.GetJSON(t, srv, "/v1/memory?status=retired", &list); list.Total != 1 || list.Entries[0].ID != "m-1" {
		t.Errorf("retired list: %+v", list)
	}
	if status := gatewaytest.PostJSON(t, srv, "/v1/memory/m-2/retire", `{"evict": true}`, &ret); status != http.StatusOK || !ret.Evicted {
		t.Fatalf("evict: %d %+v", status, ret)
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory/m-2", &e); status != http.StatusNotFound || e["code"] != "not_found" {
		t.Errorf("evicted entry: %d %v; want 404", status, e)
	}
	if status := gatewaytest.PostJSON(t, srv, "/v1/memory/m-1/retire", `{"evict": "yes"}`, &e); status != http.StatusBadRequest {
		t.Errorf("malformed body: %d %v", status, e)
	}
}
