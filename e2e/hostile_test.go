package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/protocol/contract"
)

// TestLongIDsAtEveryDoorLeaveEveryRoleServing runs `skein up --http` (every role in one process,
// each on its own connection with its own identity under the permission matrix) and sends a
// 5,000-character id through every HTTP route of docs/openapi.json and every request subject of
// the gateway, memoryd and the toolhost, each from an identity the matrix lets call it (the
// low-privilege client wherever it may). Every one is refused as too large, and afterwards the
// same process still serves each role: an HTTP listing, a memory read, a tool call and a whole
// session succeed, and no connection was lost. Before the ids were bounded, one such request
// cost the role its connection for good.
func TestLongIDsAtEveryDoorLeaveEveryRoleServing(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	httpAddr := freePort(t)
	m := startUp(t, writeProject(t, soakAgent, soakScript), "--http", httpAddr)
	bustest.WaitAgent(t, m.c, meshNames, "assistant")
	waitMemoryd(t, m.c)
	creds := auth.Dir(m.home)
	as := func(id auth.Identity) *bus.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := bus.Connect(ctx, m.url, "e2e-"+string(id), 10*time.Second, bus.WithCreds(auth.File(creds, id)))
		if err != nil {
			t.Fatalf("connect as %s: %v", id, err)
		}
		t.Cleanup(c.Close)
		return c
	}
	client, executor, miner, gateway, admin := as(auth.Client), as(auth.Executor), as(auth.Miner), as(auth.Gateway), as(auth.Admin)
	long := strings.Repeat("a", 5000)
	names := m.names

	token, err := os.ReadFile(filepath.Join(m.home, "http.token"))
	if err != nil {
		t.Fatal(err)
	}
	httpDo := func(method, path, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, "http://"+httpAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %.60s…: no answer (%.200v)", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}

	// Every route of the published document, with the long id wherever the route takes one.
	raw, err := os.ReadFile(filepath.Join(devtest.RepoRoot(t), "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := contract.ReadDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	type httpCase struct{ method, path, body string }
	var httpCases []httpCase
	for path, ops := range doc.Raw()["paths"].(map[string]any) {
		for method, op := range ops.(map[string]any) {
			method = strings.ToUpper(method)
			body := ""
			if method == http.MethodPost {
				body = "{}"
			}
			if strings.Contains(path, "{id}") {
				httpCases = append(httpCases, httpCase{method, strings.ReplaceAll(path, "{id}", long), body})
			}
			params, _ := op.(map[string]any)["parameters"].([]any)
			for _, p := range params {
				if name := p.(map[string]any)["name"]; p.(map[string]any)["in"] == "query" && (name == "agent" || name == "q") {
					httpCases = append(httpCases, httpCase{method, path + "?" + name.(string) + "=" + url.QueryEscape(long), body})
				}
			}
		}
	}
	httpCases = append(httpCases,
		httpCase{"POST", "/v1/tasks", `{"task":"add the numbers","session_id":"` + long + `"}`},
		httpCase{"POST", "/v1/tasks", `{"task":"add the numbers","agent":"` + long + `"}`})
	if len(httpCases) < 12 {
		t.Fatalf("%d HTTP cases from docs/openapi.json; the document is not being read", len(httpCases))
	}
	for _, c := range httpCases {
		status, out := httpDo(c.method, c.path, c.body)
		if status != http.StatusRequestEntityTooLarge || out["code"] != string(protocol.CodeTooLarge) {
			t.Errorf("%s %.50s…: %d %v, want 413 too_large", c.method, c.path, status, out)
		}
	}

	// Every request subject, from an identity allowed to send it.
	ask := func(c *bus.Conn, subject string, req protocol.Message) *nats.Msg {
		data, err := protocol.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		msg, err := c.NC.RequestWithContext(ctx, subject, data)
		if err != nil {
			t.Fatalf("%s %T: no answer: %v", subject, req, err)
		}
		return msg
	}
	tooLarge := func(what string, msg *nats.Msg) {
		t.Helper()
		if got := msg.Header.Get(micro.ErrorCodeHeader); got != protocol.CodeTooLarge.ServiceCode() {
			t.Errorf("%s: service error code %q (%s), want %s", what, got, msg.Header.Get(micro.ErrorHeader), protocol.CodeTooLarge.ServiceCode())
		}
	}
	for what, req := range map[string]*protocol.SubmitRequest{
		"submit session_id": {Task: "add the numbers", SessionID: long},
		"submit agent":      {Task: "add the numbers", Agent: long},
		"submit parent":     {Task: "add the numbers", Parent: long, Depth: 1},
	} {
		msg := ask(client, names.Submit(), req)
		tooLarge(what, msg)
		var rep protocol.SubmitReply
		if err := protocol.Unmarshal(msg.Data, &rep); err != nil || rep.Code != protocol.CodeTooLarge {
			t.Errorf("%s: reply %+v (%v), want code too_large", what, rep, err)
		}
	}
	tooLarge("cancel", ask(client, names.Cancel(), &protocol.CancelRequest{SessionID: long}))

	memory := []struct {
		who  *bus.Conn
		op   string
		req  protocol.Message
		name string
	}{
		{client, protocol.MemGet, &protocol.MemoryGetRequest{ID: long}, "get id (client)"},
		{client, protocol.MemRetrieve, &protocol.RetrieveRequest{Agent: long, Task: "x"}, "retrieve agent"},
		{client, protocol.MemRetrieve, &protocol.RetrieveRequest{Agent: "assistant", Task: "x", SessionID: long}, "retrieve session_id"},
		{client, protocol.MemRetrieve, &protocol.RetrieveRequest{Agent: "assistant", Task: "x", Tools: []string{long}}, "retrieve tools"},
		{client, protocol.MemInspect, &protocol.MemoryInspectRequest{Agent: long}, "inspect agent"},
		{client, protocol.MemInspect, &protocol.MemoryInspectRequest{Query: long}, "inspect query"},
		{client, protocol.MemList, &protocol.MemoryListRequest{Agent: long}, "list agent"},
		{gateway, protocol.MemRetire, &protocol.MemoryRetireRequest{ID: long}, "retire id"},
		{executor, protocol.MemRemember, &protocol.RememberRequest{Agent: long, SessionID: "s-1", Source: protocol.SourceRemembered,
			Notes: []protocol.RememberNote{{Text: "x"}}}, "remember agent"},
		{executor, protocol.MemRemember, &protocol.RememberRequest{Agent: "assistant", SessionID: long, Source: protocol.SourceRemembered,
			Notes: []protocol.RememberNote{{Text: "x"}}}, "remember session_id"},
		{miner, protocol.MemIngest, &protocol.IngestRequest{Agent: long, SessionID: "s-1"}, "ingest agent"},
		{miner, protocol.MemIngest, &protocol.IngestRequest{Agent: "assistant", SessionID: long}, "ingest session_id"},
		{miner, protocol.MemFeedback, &protocol.FeedbackRequest{Agent: "assistant", SessionID: "s-1", Helpful: []string{long}}, "feedback helpful"},
		{admin, protocol.MemEvict, &protocol.MemoryEvictRequest{Agent: long, DryRun: true}, "evict agent"},
	}
	for _, c := range memory {
		tooLarge("memory "+c.name, ask(c.who, names.Memory(c.op), c.req))
	}
	// An import reports the bad entry and skips it, rather than refusing the whole file.
	var imp protocol.MemoryImportReply
	if err := protocol.Unmarshal(ask(admin, names.Memory(protocol.MemImport), &protocol.MemoryImportRequest{Entries: []protocol.MemoryEntry{
		{ID: long, Agent: "assistant", Text: "a guideline", Polarity: protocol.PolarityAvoid}}}).Data, &imp); err != nil ||
		imp.Skipped != 1 || len(imp.Problems) != 1 || !strings.Contains(imp.Problems[0], "at most") {
		t.Errorf("import of an entry with a long id: %+v (%v), want it skipped with the reason", imp, err)
	}

	tool := names.Tool("sum")
	args := json.RawMessage(`{"numbers":[1,2]}`)
	for what, req := range map[string]*protocol.ToolRequest{
		"session_id": {Tool: "sum", Args: args, SessionID: long},
		"step_id":    {Tool: "sum", Args: args, SessionID: "s-1", StepID: long},
		"call_id":    {Tool: "sum", Args: args, SessionID: "s-1", CallID: long},
		"agent":      {Tool: "sum", Args: args, Agent: long},
	} {
		var rep protocol.ToolReply
		msg := ask(executor, tool, req)
		if err := protocol.Unmarshal(msg.Data, &rep); err != nil || rep.Kind != protocol.ToolErrBadArgs || !strings.Contains(rep.Error, "at most") ||
			rep.Code != protocol.CodeTooLarge {
			t.Errorf("tool call with a long %s: %+v (%v), want invalid_arguments naming the limit, code too_large", what, rep.ToolResult, err)
		}
		tooLarge("tool call with a long "+what, msg)
	}

	// The same process still serves every role.
	if status, out := httpDo("GET", "/v1/sessions", ""); status != http.StatusOK {
		t.Errorf("gateway after the long ids: GET /v1/sessions %d %v", status, out)
	}
	if status, out := httpDo("GET", "/v1/memory", ""); status != http.StatusOK {
		t.Errorf("gateway and memoryd after the long ids: GET /v1/memory %d %v", status, out)
	}
	var got protocol.MemoryGetReply
	if msg := ask(client, names.Memory(protocol.MemGet), &protocol.MemoryGetRequest{ID: "no-such-entry"}); protocol.Unmarshal(msg.Data, &got) != nil ||
		got.Code != protocol.CodeNotFound {
		t.Errorf("memoryd after the long ids: get %q %+v", msg.Data, got.Fault)
	}
	var sum protocol.ToolReply
	if err := protocol.Unmarshal(ask(executor, tool, &protocol.ToolRequest{Tool: "sum", Args: args, SessionID: "s-1", StepID: "s1", CallID: "s-1.s1.t1.c0"}).Data, &sum); err != nil || !sum.OK {
		t.Errorf("toolhost after the long ids: %+v (%v)", sum.ToolResult, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r := runSession(ctx, client, "add the numbers"); r.err != nil || !r.outcome.Succeeded() {
		t.Errorf("a whole session after the long ids: %v %v", r.outcome, r.err)
	}
	select {
	case <-m.p.done:
		t.Fatal("skein up exited")
	default:
	}
	if b, _ := os.ReadFile(m.p.log); strings.Contains(string(b), "will not be reconnected") {
		t.Errorf("a role lost its connection:\n%s", b)
	}
	t.Logf("%d HTTP cases, %d memory cases, 4 submit and cancel cases, 4 tool cases", len(httpCases), len(memory))
}
