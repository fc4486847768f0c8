package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/gateway/gatewaytest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

const testToken = gatewaytest.Token

var testClient = gatewaytest.Client

// do sends one raw request (no token added) and decodes a JSON error answer.
func do(t *testing.T, req *http.Request) (int, map[string]string, http.Header) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	body, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(body, &out)
	return resp.StatusCode, out, resp.Header
}

func TestHTTPRejections(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	host := strings.TrimPrefix(srv.URL, "http://")

	req := func(method, path, body string, headers ...string) *http.Request {
		r, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		return r
	}
	auth := "Bearer " + testToken
	task := `{"task": "Greet Ada"}`
	cases := []struct {
		name   string
		r      *http.Request
		status int
		code   string
	}{
		{"no token", req("POST", "/v1/tasks", task, "Content-Type", "application/json"), 401, "unauthorized"},
		{"wrong token", req("POST", "/v1/tasks", task, "Content-Type", "application/json", "Authorization", "Bearer "+strings.Repeat("x", len(testToken))), 401, "unauthorized"},
		{"token not bearer", req("GET", "/v1/sessions/x", "", "Authorization", "Basic "+testToken), 401, "unauthorized"},
		{"no token on reads either", req("GET", "/v1/sessions/x/events", ""), 401, "unauthorized"},
		{"text body", req("POST", "/v1/tasks", task, "Content-Type", "text/plain", "Authorization", auth), 415, "unsupported_media_type"},
		{"form body", req("POST", "/v1/tasks", "task=hi", "Content-Type", "application/x-www-form-urlencoded", "Authorization", auth), 415, "unsupported_media_type"},
		{"no content type", req("POST", "/v1/tasks", task, "Authorization", auth), 415, "unsupported_media_type"},
		{"cross-site fetch", req("POST", "/v1/tasks", task, "Content-Type", "application/json", "Authorization", auth, "Sec-Fetch-Site", "cross-site"), 403, "forbidden"},
		{"same-site is not same-origin", req("GET", "/v1/sessions/x", "", "Authorization", auth, "Sec-Fetch-Site", "same-site"), 403, "forbidden"},
		{"foreign origin", req("POST", "/v1/tasks", task, "Content-Type", "application/json", "Authorization", auth, "Origin", "https://evil.example"), 403, "forbidden"},
		{"foreign origin, no token", req("POST", "/v1/tasks", task, "Content-Type", "text/plain", "Origin", "http://evil.example"), 403, "forbidden"},
		{"body too large", req("POST", "/v1/tasks", `{"task": "`+strings.Repeat("x", protocol.MaxTaskBytes+8192)+`"}`, "Content-Type", "application/json", "Authorization", auth), 413, "too_large"},
		{"malformed", req("POST", "/v1/tasks", `{"task": 1}`, "Content-Type", "application/json", "Authorization", auth), 400, "bad_request"},
		{"rejected", req("POST", "/v1/tasks", `{"task": ""}`, "Content-Type", "application/json", "Authorization", auth), 422, "rejected"},
		{"wrong method", req("GET", "/v1/tasks", "", "Authorization", auth), 405, "method_not_allowed"},
		{"wrong method on a session", req("DELETE", "/v1/sessions/x", "", "Authorization", auth), 405, "method_not_allowed"},
		// The method is wrong before any body is: 405, not 415 for a missing Content-Type.
		{"PUT without a body", req("PUT", "/v1/sessions/x", "", "Authorization", auth), 405, "method_not_allowed"},
		{"PUT with a text body", req("PUT", "/v1/tasks", "x", "Content-Type", "text/plain", "Authorization", auth), 405, "method_not_allowed"},
		{"TRACE on health", req("TRACE", "/v1/health", "", "Authorization", auth), 405, "method_not_allowed"},
		{"scheme only", req("GET", "/v1/sessions/x", "", "Authorization", "Bearer"), 401, "unauthorized"},
		{"no such route", req("GET", "/v2/anything", "", "Authorization", auth), 404, "not_found"},
	}
	for _, c := range cases {
		status, out, hdr := do(t, c.r)
		if status != c.status || out["code"] != c.code || out["error"] == "" {
			t.Errorf("%s: %d %v; want %d with code %q and an error", c.name, status, out, c.status, c.code)
		}
		if code := protocol.Code(c.code); !code.Known() || code.HTTPStatus() != c.status {
			t.Errorf("%s: code %s is not the table's code of status %d", c.name, code, c.status)
		}
		if status == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without a Bearer challenge", c.name)
		}
		if status == 405 && hdr.Get("Allow") == "" {
			t.Errorf("%s: 405 without Allow", c.name)
		}
	}
	// What a same-origin browser page and a plain client send is accepted.
	for _, headers := range [][]string{
		{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"},
		{"Sec-Fetch-Site", "none"},
		{"Content-Type", "application/json; charset=utf-8"},
		{"Authorization", "bearer " + testToken}, // the scheme's name in any case (RFC 9110)
		{"Authorization", "BEARER  " + testToken},
	} {
		h := append([]string{"Content-Type", "application/json", "Authorization", auth}, headers...)
		if status, out, _ := do(t, req("POST", "/v1/tasks", task, h...)); status != http.StatusAccepted {
			t.Errorf("headers %v: %d %v; want 202", headers, status, out)
		}
	}
	if n := f.taskCount(t, testAgent); n != 5 {
		t.Errorf("%d tasks queued; want only the 5 accepted ones", n)
	}
}

func TestHTTPWithoutATokenRefusesEverything(t *testing.T) {
	f := newFixture(t)
	d := f.deps
	d.HTTPToken = ""
	gw, err := New(testCtx(t), d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	r, _ := http.NewRequest("GET", srv.URL+"/v1/sessions/x", nil)
	r.Header.Set("Authorization", "Bearer ")
	if status, out, _ := do(t, r); status != http.StatusServiceUnavailable || out["code"] != "unavailable" {
		t.Errorf("%d %v; want 503 unavailable", status, out)
	}
}

func TestHTTPEventStreamsAreCappedPerClient(t *testing.T) {
	f := newFixture(t)
	f.deps.Config.Gateway.MaxEventStreams = 2
	gw, err := New(testCtx(t), f.deps)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	if status, out := postTask(t, srv, `{"task": "Greet Ada", "session_id": "cap-1"}`); status != http.StatusAccepted {
		t.Fatalf("%d %v", status, out)
	}
	open := func() (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/sessions/cap-1/events", nil)
		resp, err := testClient.Do(r)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return resp, cancel
	}
	var cancels []context.CancelFunc
	for i := 0; i < 2; i++ {
		resp, cancel := open()
		cancels = append(cancels, cancel)
		t.Cleanup(cancel)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
	}
	resp, cancel := open()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	cancel()
	if resp.StatusCode != http.StatusTooManyRequests || out["code"] != "too_many_requests" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %d %v; want 429 too_many_requests with Retry-After", resp.StatusCode, out)
	}
	// Closing a stream frees its slot.
	cancels[0]()
	poll.Eventually(t, 10*time.Second, "a closed stream's slot to be freed", func() error {
		resp, cancel := open()
		cancel()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("a new stream gets %d", resp.StatusCode)
		}
		return nil
	})
}

// The real server: a client that never finishes its headers is dropped, and an event stream
// outlives the server's write timeout.
func TestHTTPServerTimeouts(t *testing.T) {
	f := newFixture(t)
	addr := serveWith(t, f, func() {
		httpTimeouts.readHeader, httpTimeouts.write = 300*time.Millisecond, 300*time.Millisecond
	})
	base := "http://" + addr

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/sessions/x HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("a half-sent request should be closed by the server, got %v", err)
	}

	resp := submitAndFollow(t, &httptest.Server{URL: base}, "slow-1")
	// the duration is the point: the stream must stay open well past the server's write
	// timeout, and no event marks that time passing.
	time.Sleep(3 * httpTimeouts.write)
	f.play(t, succeeded("slow-1", "late")...)
	var events []string
	sse := readSSE(t, resp.Body)
	for event, _, ok := sse.next(); ok; event, _, ok = sse.next() {
		events = append(events, event)
	}
	if len(events) == 0 || events[len(events)-1] != string(protocol.EvUsage) {
		t.Fatalf("stream cut before its end: got %v", events)
	}
}

// serveWith runs the gateway's real server with the timeouts set by set, until the test ends.
func serveWith(t *testing.T, f *fixture, set func()) string {
	t.Helper()
	saved := httpTimeouts
	set()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.gw.serveListener(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done; httpTimeouts = saved })
	return ln.Addr().String()
}

// closedByServer waits (at most guard) for the server to close conn after what it already
// sent, and returns what it sent last.
func closedByServer(t *testing.T, conn net.Conn, guard time.Duration) []byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(guard))
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the server kept the connection open for %v: %v", guard, err)
	}
	return b
}

// The read timeout bounds a whole request, body included: a client that sends its headers and
// then trickles nothing of the body it announced gets a 400 and is dropped, and nothing is
// submitted. The idle timeout closes a keep-alive connection that sends no next request, however
// long the read timeout is.
func TestHTTPServerReadAndIdleTimeouts(t *testing.T) {
	f := newFixture(t)
	const guard = 10 * time.Second // far beyond the timeouts under test, far below the defaults
	t.Run("slow body", func(t *testing.T) {
		addr := serveWith(t, f, func() { httpTimeouts.read = 500 * time.Millisecond })
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"task": "Greet Ada", "session_id": "slow-body-1"}`
		head := "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		if _, err := conn.Write([]byte(head + body[:10])); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(closedByServer(t, conn, guard))), nil)
		if err != nil {
			t.Fatalf("no answer before the server closed: %v", err)
		}
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusBadRequest || out["code"] != "bad_request" || !strings.Contains(out["error"], "timeout") {
			t.Errorf("slow body: %d %v, want 400 bad_request naming the timeout", resp.StatusCode, out)
		}
		got, err := testClient.Get("http://" + addr + "/v1/sessions/slow-body-1")
		if err != nil {
			t.Fatal(err)
		}
		got.Body.Close()
		if got.StatusCode != http.StatusNotFound {
			t.Errorf("the half-sent task was submitted: GET its session gives %d", got.StatusCode)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		addr := serveWith(t, f, func() { httpTimeouts.read, httpTimeouts.idle = time.Minute, 300*time.Millisecond })
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("GET /v1/sessions/none HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken + "\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Close {
			t.Fatalf("first request: %d (close %v), want a 404 on a connection kept alive", resp.StatusCode, resp.Close)
		}
		_ = conn.SetReadDeadline(time.Now().Add(guard))
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("an idle keep-alive connection was not closed by the server: read %d bytes, %v", n, err)
		}
	})
}

func TestHTTPTokenFile(t *testing.T) {
	t.Setenv(HTTPTokenEnv, "")
	home := filepath.Join(t.TempDir(), "home")
	tok, path, err := HTTPToken(home, "")
	if err != nil || len(tok) < 32 || path != filepath.Join(home, HTTPTokenFile) {
		t.Fatalf("%q %q %v", tok, path, err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, home: 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
	again, _, err := HTTPToken(home, "")
	if err != nil || again != tok {
		t.Errorf("second start: %q %v, want the same token", again, err)
	}
	if got, _, _ := HTTPToken(home, "configured-token-0123456789"); got != "configured-token-0123456789" {
		t.Errorf("config token ignored: %q", got)
	}
	t.Setenv(HTTPTokenEnv, "env-token-0123456789abcdef")
	if got, _, _ := HTTPToken(home, "configured-token-0123456789"); got != "env-token-0123456789abcdef" {
		t.Errorf("env token does not win: %q", got)
	}
	t.Setenv(HTTPTokenEnv, "short")
	if _, _, err := HTTPToken(home, ""); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("short token: %v", err)
	}
}

// Callers that make the token at once (the gateway and `skein up` saying where it is) agree on
// one token: none finds the file before its token is in it.
func TestHTTPTokenMadeConcurrentlyIsOneToken(t *testing.T) {
	t.Setenv(HTTPTokenEnv, "")
	for round := 0; round < 20; round++ {
		home := filepath.Join(t.TempDir(), "home")
		toks := make(chan string, 8)
		errs := make(chan error, 8)
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok, _, err := HTTPToken(home, "")
				toks <- tok
				errs <- err
			}()
		}
		wg.Wait()
		close(toks)
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		first := <-toks
		for tok := range toks {
			if tok != first {
				t.Fatalf("round %d: two tokens %q and %q", round, first, tok)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(home, ".*")); len(left) != 0 {
			t.Fatalf("round %d: temporary files left: %v", round, left)
		}
	}
}

// The env file `skein creds` writes for deployed gateways: private, one SKEIN_HTTP_TOKEN line that
// the gateway takes as its token, kept when it exists, refused when others can read it.
func TestHTTPTokenEnvFile(t *testing.T) {
	t.Setenv(HTTPTokenEnv, "")
	dir := filepath.Join(t.TempDir(), "creds")
	path, err := EnsureHTTPTokenEnv(dir)
	if err != nil || path != filepath.Join(dir, HTTPTokenEnvFile) {
		t.Fatalf("%q %v", path, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	b, _ := os.ReadFile(path)
	name, tok, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "=")
	if !ok || name != HTTPTokenEnv || strings.Contains(tok, "\n") || len(tok) < 32 {
		t.Fatalf("%s holds %q, want one line %s=<token>", path, b, HTTPTokenEnv)
	}
	t.Setenv(HTTPTokenEnv, tok)
	if got, _, err := HTTPToken(t.TempDir(), ""); err != nil || got != tok {
		t.Fatalf("a gateway given the file's variable uses %q (%v), want %q", got, err, tok)
	}
	if again, err := EnsureHTTPTokenEnv(dir); err != nil || again != path {
		t.Fatalf("second run: %q %v", again, err)
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Fatalf("second run replaced the token: %q, was %q", b2, b)
	}
	other, err := EnsureHTTPTokenEnv(filepath.Join(t.TempDir(), "creds"))
	if b3, _ := os.ReadFile(other); err != nil || string(b3) == string(b) {
		t.Fatalf("two deployments got the same token (%v)", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureHTTPTokenEnv(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable token file: %v, want a refusal naming chmod 600", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("TOKEN=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureHTTPTokenEnv(dir); err == nil || !strings.Contains(err.Error(), HTTPTokenEnv+"=<token>") {
		t.Errorf("a malformed token file: %v", err)
	}
}

// Every route that takes an id, or an agent or q query parameter, refuses a 5,000-character one
// as too large before it reaches NATS, and the gateway serves on: the same id used as a subject or
// key would have cost the gateway its connection (the "GET /v1/sessions/<5000 × a>").
func TestHTTPRoutesRefuseOverlongIDsAndKeepServing(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t)
	long := strings.Repeat("a", 5000)
	tried := 0
	for _, r := range apiRoutes {
		method, path, _ := strings.Cut(r.Pattern, " ")
		var urls []string
		if strings.Contains(path, "{id}") {
			urls = append(urls, strings.ReplaceAll(path, "{id}", long))
		}
		for _, q := range r.Query {
			if n := q.name(); n == "agent" || n == "q" {
				urls = append(urls, path+"?"+n+"="+long)
			}
		}
		for _, u := range urls {
			tried++
			req, err := http.NewRequest(method, srv.URL+u, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testToken)
			status, out, _ := do(t, req)
			if status != http.StatusRequestEntityTooLarge || out["code"] != "too_large" || len(out["error"]) > 200 {
				t.Errorf("%s %.40s…: %d %.200v, want 413 too_large with a short reason", method, u, status, out)
			}
		}
	}
	if tried < 12 {
		t.Fatalf("tried %d routes; the route table is not being read", tried)
	}
	if status, out := postTask(t, srv, `{"task": "hi", "session_id": "after-long-ids"}`); status != http.StatusAccepted {
		t.Fatalf("the gateway no longer serves: %d %v", status, out)
	}
	var s protocol.Session
	if status := gatewaytest.GetJSON(t, srv, "/v1/sessions/after-long-ids", &s); status != http.StatusOK || s.SessionID != "after-long-ids" {
		t.Fatalf("the gateway no longer serves: %d %+v", status, s)
	}
	if f.deps.Conn.NC.IsClosed() {
		t.Fatal("the gateway's connection was closed")
	}
}
