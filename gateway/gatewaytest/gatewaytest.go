// Package gatewaytest is a client of the gateway's HTTP API for tests, the gateway's own and
// e2e's: the test token a test gateway is given, a client that sends it, JSON in and out. It
// holds no gateway code, so the gateway's internal tests can use it too.
package gatewaytest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Token is the HTTP token a test gives its gateway (gateway.Deps.HTTPToken).
const Token = "skh_test-token-0123456789abcdef"

// bearer adds Token to every request that has no Authorization header yet.
type bearer struct{}

func (bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+Token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Client sends Token with every request.
var Client = &http.Client{Transport: bearer{}}

// GetJSON GETs path with the token and decodes the JSON answer into out.
func GetJSON(t testing.TB, srv *httptest.Server, path string, out any) int {
	t.Helper()
	resp, err := Client.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: status %d, body is not JSON: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// PostJSON POSTs the JSON body to path with the token and decodes the JSON answer into out.
func PostJSON(t testing.TB, srv *httptest.Server, path, body string, out any) int {
	t.Helper()
	resp, err := Client.Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("POST %s: status %d, body is not JSON: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode
}
