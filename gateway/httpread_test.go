package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/gateway/console"
	"github.com/skein-mesh/skein/gateway/gatewaytest"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

func publishUsage(t *testing.T, f *fixture, session string, cost float64) {
	t.Helper()
	ev := protocol.Event{SessionID: session, Agent: testAgent, Type: protocol.EvUsage, Role: protocol.RolePlanner, Time: time.Now().UTC(),
		Report: &protocol.UsageReport{Usage: protocol.Usage{InputTokens: 120, OutputTokens: 30}, Steps: 1, WallTimeS: 1.5, CostUSD: &cost,
			ByModel: map[string]protocol.Usage{"claude-sonnet-4-5": {InputTokens: 120, OutputTokens: 30}}}}
	data, err := protocol.Marshal(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.mesh.Conn.JS.Publish(testCtx(t), f.mesh.Names.Usage(testAgent), data); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPSessionsListAndUsage(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	for _, body := range []string{`{"task": "Greet Ada", "session_id": "list-1"}`, `{"task": "Count the stars", "session_id": "list-2"}`} {
		if status, out := postTask(t, srv, body); status != http.StatusAccepted {
			t.Fatalf("status %d %v", status, out)
		}
	}
	publishUsage(t, f, "list-1", 0.25)

	var list struct {
		Sessions  []SessionRow `json:"sessions"`
		Truncated bool         `json:"truncated"`
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/sessions", &list); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if len(list.Sessions) != 2 || list.Sessions[0].SessionID != "list-2" || list.Sessions[1].SessionID != "list-1" {
		t.Fatalf("sessions %+v; want list-2 then list-1", list.Sessions)
	}
	if u := list.Sessions[1].Usage; u == nil || u.InputTokens != 120 || u.CostUSD == nil || *u.CostUSD != 0.25 || list.Sessions[0].Usage != nil {
		t.Errorf("usage not attached to its session: %+v / %+v", list.Sessions[1].Usage, list.Sessions[0].Usage)
	}
	if gatewaytest.GetJSON(t, srv, "/v1/sessions?q=STARS", &list); len(list.Sessions) != 1 || list.Sessions[0].SessionID != "list-2" {
		t.Errorf("search: %+v", list.Sessions)
	}
	// The list is cut to the newest while it is read: limit 1 keeps the newer of the two.
	if gatewaytest.GetJSON(t, srv, "/v1/sessions?limit=1", &list); len(list.Sessions) != 1 || !list.Truncated || list.Sessions[0].SessionID != "list-2" {
		t.Errorf("limit 1: %+v, truncated %v; want list-2 alone, truncated", list.Sessions, list.Truncated)
	}
	if gatewaytest.GetJSON(t, srv, "/v1/sessions?agent=nobody", &list); len(list.Sessions) != 0 {
		t.Errorf("agent filter: %+v", list.Sessions)
	}
	var e map[string]string
	for _, bad := range []string{"/v1/sessions?since=yesterday", "/v1/sessions?limit=0", "/v1/usage?limit=999999"} {
		if status := gatewaytest.GetJSON(t, srv, bad, &e); status != http.StatusBadRequest || e["code"] != "bad_request" {
			t.Errorf("%s: %d %v; want 400 bad_request", bad, status, e)
		}
	}

	var usage struct {
		Sessions []SessionUsage `json:"sessions"`
	}
	if status := gatewaytest.GetJSON(t, srv, "/v1/usage?since=1h", &usage); status != http.StatusOK || len(usage.Sessions) != 1 {
		t.Fatalf("usage: %d %+v", status, usage)
	}
	if u := usage.Sessions[0]; u.SessionID != "list-1" || u.Agent != testAgent || u.ModelCostUSD["claude-sonnet-4-5"] <= 0 {
		t.Errorf("usage row %+v; want list-1 with the model priced", u)
	}
}

func TestHTTPDeadLetters(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	msg := nats.NewMsg(f.mesh.Names.DLQ(protocol.StreamWork))
	msg.Data = []byte("payload")
	msg.Header.Set(bus.HeaderDLQSubject, f.mesh.Names.Work(testAgent))
	msg.Header.Set(bus.HeaderDLQStream, f.mesh.Names.Stream(protocol.StreamWork))
	msg.Header.Set(bus.HeaderDLQSequence, "42")
	msg.Header.Set(bus.HeaderDLQConsumer, "executor-"+testAgent)
	msg.Header.Set(bus.HeaderDLQDeliveries, "5")
	if _, err := f.mesh.Conn.JS.PublishMsg(testCtx(t), msg); err != nil {
		t.Fatal(err)
	}
	var rows []DeadLetter
	if status := gatewaytest.GetJSON(t, srv, "/v1/dlq", &rows); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if len(rows) != 1 || rows[0].Subject != f.mesh.Names.Work(testAgent) || rows[0].Sequence != "42" || rows[0].Deliveries != "5" || rows[0].Bytes != 7 {
		t.Fatalf("dead letters %+v", rows)
	}
}

// Without memoryd the memory routes answer 503 unavailable (e2e/inproc/gateway tests
// them with memoryd running).
func TestHTTPMemoryWithoutMemoryd(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	var e map[string]string
	if status := gatewaytest.GetJSON(t, srv, "/v1/memory", &e); status != http.StatusServiceUnavailable || e["code"] != "unavailable" {
		t.Fatalf("without memoryd: %d %v; want 503 unavailable", status, e)
	}
}

// The console's files are public (the browser cannot send the token when it loads a page) but
// locked to their own origin; the API behind them still wants the token.
func TestConsoleIsServedOutsideTheTokenCheck(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	resp, err := http.Get(srv.URL + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Fatalf("console: %d %v", resp.StatusCode, resp.Header)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
		t.Errorf("/: %d %s; want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}
	r, _ := http.NewRequest("GET", srv.URL+"/v1/sessions", nil)
	if status, out, _ := do(t, r); status != http.StatusUnauthorized {
		t.Errorf("sessions without a token: %d %v", status, out)
	}
	for path, allow := range map[string]string{"/v1/sessions": "GET, HEAD", "/v1/memory/x": "GET, HEAD", "/v1/memory/x/retire": "POST"} {
		method := "POST"
		if allow == "POST" {
			method = "GET"
		}
		r, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		r.Header.Set("Authorization", "Bearer "+testToken)
		r.Header.Set("Content-Type", "application/json")
		if status, out, h := do(t, r); status != http.StatusMethodNotAllowed || h.Get("Allow") != allow {
			t.Errorf("%s %s: %d %v Allow %q; want 405 with Allow %s", method, path, status, out, h.Get("Allow"), allow)
		}
	}
	r, _ = http.NewRequest("POST", srv.URL+"/console/", strings.NewReader("{}"))
	if status, out, _ := do(t, r); status != http.StatusMethodNotAllowed || out["code"] != string(protocol.CodeMethodNotAllowed) {
		t.Errorf("POST /console/: %d %v; want 405 method_not_allowed", status, out)
	}
}

// Browsers ask for /favicon.ico on their own, without the token: it is answered, not refused.
func TestFaviconNeedsNoToken(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	resp, err := http.Get(srv.URL + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	icon, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// An ICO file starts with reserved 0, type 1 (icon).
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/x-icon" || !bytes.HasPrefix(icon, []byte{0, 0, 1, 0}) {
		t.Fatalf("/favicon.ico: %d %s %d bytes; want 200 with an icon", resp.StatusCode, resp.Header.Get("Content-Type"), len(icon))
	}
	resp, err = http.Get(srv.URL + "/console/favicon.ico") // what the page's <link rel=icon> names
	if err != nil {
		t.Fatal(err)
	}
	same, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(same, icon) {
		t.Errorf("/console/favicon.ico: %d, %d bytes; want the same icon", resp.StatusCode, len(same))
	}
}

// The console's status filter offers what pkg/protocol defines, every outcome included.
func TestConsoleVocabularyIsProtocols(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	resp, err := http.Get(srv.URL + "/console/vocab.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v console.Vocabulary
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("vocab.json: %d %v", resp.StatusCode, err)
	}
	if !slices.Equal(v.Outcomes, protocol.Outcomes()) || !slices.Equal(v.SessionStatuses, protocol.SessionStatuses()) ||
		!slices.Contains(v.Outcomes, protocol.OutcomeNotAccomplished) || !slices.Contains(v.Outcomes, protocol.OutcomeIncompleteToolFail) {
		t.Errorf("vocab.json %+v; want protocol's statuses and outcomes", v)
	}
}

// Each query parameter is read as docs/openapi.json describes it (httpquery.go): a value outside
// its schema is refused naming the parameter, one inside it is taken, and a parameter given with
// no value is refused rather than read as absent.
func TestHTTPQueryParametersAreCheckedAsDocumented(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	postTask(t, srv, `{"task": "Greet Ada", "session_id": "q-1"}`)
	for _, c := range []struct {
		path   string
		status int
		names  string // the parameter the refusal names
	}{
		{"/v1/sessions?since=24h&limit=2000", 200, ""},
		{"/v1/sessions?since=1h30m&limit=1", 200, ""},
		{"/v1/sessions?since=99999.999999999h99999h1m1s", 200, ""},
		{"/v1/sessions?since=0", 200, ""},
		{"/v1/sessions?limit=", 400, "limit"},
		{"/v1/sessions?limit=0", 400, "limit"},
		{"/v1/sessions?limit=2001", 400, "limit"},
		{"/v1/sessions?limit=1.5", 400, "limit"},
		{"/v1/sessions?since=", 400, "since"},
		{"/v1/sessions?since=-1h", 400, "since"},
		{"/v1/sessions?since=1.h", 400, "since"},     // time.ParseDuration takes it, the pattern does not
		{"/v1/sessions?since=999999h", 400, "since"}, // six digits: the pattern bounds every part
		{"/v1/sessions?since=24h%0A", 400, "since"},
		{"/v1/sessions?agent=", 400, "agent"},
		{"/v1/sessions?status=&q=", 200, ""},
		{"/v1/usage?since=2h&limit=5", 200, ""},
		{"/v1/dlq?limit=x", 400, "limit"},
		{"/v1/memory?tier=", 400, "tier"},
		{"/v1/memory?tier=operational", 400, "tier"},
		{"/v1/memory?status=", 400, "status"},
		{"/v1/memory?status=deleted", 400, "status"},
		{"/v1/memory?offset=-1", 400, "offset"},
		{"/v1/memory?limit=201", 400, "limit"},
		{"/v1/memory/search?top_k=0", 400, "top_k"},
		{"/v1/memory/search?top_k=101", 400, "top_k"},
	} {
		var out map[string]any
		status := gatewaytest.GetJSON(t, srv, c.path, &out)
		if status != c.status {
			t.Errorf("GET %s: %d %v; want %d", c.path, status, out, c.status)
			continue
		}
		if msg, _ := out["error"].(string); c.names != "" && !strings.Contains(msg, "query parameter "+c.names) {
			t.Errorf("GET %s: %q does not name the parameter %s", c.path, msg, c.names)
		}
	}
	var list SessionList
	if gatewaytest.GetJSON(t, srv, "/v1/sessions?since=0", &list); len(list.Sessions) != 0 {
		t.Errorf("since=0 listed %d sessions; a window of nothing lists none", len(list.Sessions))
	}
}
