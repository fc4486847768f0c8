package gateway

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol/contract"
)

var update = flag.Bool("update", false, "rewrite docs/openapi.json from the route table")

const openAPIPath = "../docs/openapi.json"

// The committed document is the one the gateway serves; `make contract` rewrites it.
func TestOpenAPIDocumentIsCurrentAndServed(t *testing.T) {
	got, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(openAPIPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatalf("%v (write it with `make contract`)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/openapi.json is not what the gateway's route table says: run `make contract` and commit it")
	}
	f := newFixture(t)
	srv := f.serve(t)
	resp, err := testClient.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(served, want) {
		t.Errorf("GET /v1/openapi.json: %d %s, %d bytes; want docs/openapi.json", resp.StatusCode, resp.Header.Get("Content-Type"), len(served))
	}
}

// Every /v1/ route the gateway serves is in the document, and the document has no route the
// gateway does not serve: a route added to Handler without a row in apiRoutes fails here.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	f := newFixture(t)
	doc := readOpenAPI(t)
	paths, _ := doc.Raw()["paths"].(map[string]any)
	documented := map[string]bool{}
	for path, ops := range paths {
		for method := range ops.(map[string]any) {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, p := range f.gw.routes() {
		if _, path, ok := strings.Cut(p, " "); !ok || !strings.HasPrefix(path, "/v1/") {
			continue // the catch-all, and pages that are not the API
		}
		served[p] = true
		if !documented[p] {
			t.Errorf("route %q is served but not in docs/openapi.json: add it to apiRoutes (gateway/openapi.go)", p)
		}
	}
	for p := range documented {
		if !served[p] {
			t.Errorf("docs/openapi.json documents %q, which the gateway does not serve", p)
		}
	}
	if len(served) < 6 {
		t.Fatalf("found %d routes; the route table is not being read", len(served))
	}
}

func readOpenAPI(t *testing.T) *contract.Document {
	t.Helper()
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := contract.ReadDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// responseSchema finds, in the document alone, the schema of a response: the operation whose
// path template matches path, its response for status, the schema name of its content.
func responseSchema(t *testing.T, doc *contract.Document, method, path string, status int, contentType string) string {
	t.Helper()
	paths, _ := doc.Raw()["paths"].(map[string]any)
	for tmpl, ops := range paths {
		if !templateMatches(tmpl, path) {
			continue
		}
		op, ok := ops.(map[string]any)[strings.ToLower(method)].(map[string]any)
		if !ok {
			continue
		}
		rs, ok := op["responses"].(map[string]any)[strconv.Itoa(status)].(map[string]any)
		if !ok {
			t.Errorf("%s %s: status %d is not documented", method, path, status)
			return ""
		}
		c, ok := rs["content"].(map[string]any)[contentType].(map[string]any)
		if !ok {
			t.Errorf("%s %s %d: content %s is not documented", method, path, status, contentType)
			return ""
		}
		ref, _ := c["schema"].(map[string]any)["$ref"].(string)
		return strings.TrimPrefix(ref, contract.SchemaRef)
	}
	t.Errorf("%s %s: no such operation in the document", method, path)
	return ""
}

func templateMatches(tmpl, path string) bool {
	a, b := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !strings.HasPrefix(a[i], "{") {
			return false
		}
	}
	return true
}

// Real HTTP traffic, successes and refusals, read with docs/openapi.json alone.
func TestHTTPTrafficMatchesOpenAPI(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	doc := readOpenAPI(t)
	calls := []struct {
		method, path, body string
		client             *http.Client
		status             int
	}{
		{"POST", "/v1/tasks", `{"task":"Greet Ada","session_id":"oa-1","budget":{"max_turns":3}}`, testClient, 202},
		{"POST", "/v1/tasks", `{"task":"Greet Ada","session_id":"oa-1"}`, testClient, 202},
		{"POST", "/v1/tasks", `{"task":""}`, testClient, 422},
		{"POST", "/v1/tasks", `{"task":"x","colour":1}`, testClient, 400},
		{"POST", "/v1/tasks", `{"task":"x"}`, http.DefaultClient, 401},
		{"GET", "/v1/sessions/oa-1", "", testClient, 200},
		{"GET", "/v1/sessions/none", "", testClient, 404},
		{"GET", "/v1/sessions/oa-1/tree", "", testClient, 200},
		{"POST", "/v1/sessions/oa-1/messages", `{"text":"and Bob"}`, testClient, 422}, // the first turn still runs
		{"POST", "/v1/sessions/oa-1/cancel", `{"reason":"test"}`, testClient, 200},
		{"POST", "/v1/sessions/oa-1/cancel", "", testClient, 200},
	}
	for _, c := range calls {
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" { // an optional body left out needs no Content-Type
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s %s: status %d %s; want %d", c.method, c.path, c.body, resp.StatusCode, body, c.status)
			continue
		}
		name := responseSchema(t, doc, c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		if name == "" {
			continue
		}
		if err := doc.ValidateJSON(name, body); err != nil {
			t.Errorf("%s %s → %d %s: %v", c.method, c.path, resp.StatusCode, body, err)
		}
	}
}
