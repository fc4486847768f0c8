package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The HTTP API's defaults. Timeouts apply to every request except the event stream, which sets a
// write deadline per event instead (a stream lives as long as its session).
const (
	HTTPTokenFile          = "http.token"
	HTTPTokenEnv           = "SKEIN_HTTP_TOKEN"
	DefaultMaxEventStreams = 8
	minTokenLen            = 16
)

// httpTimeouts of the API's server (a variable so tests can shorten them).
var httpTimeouts = struct{ readHeader, read, write, idle time.Duration }{
	readHeader: 10 * time.Second,
	read:       30 * time.Second,
	write:      30 * time.Second,
	idle:       120 * time.Second,
}

// HTTPToken returns the bearer token of the HTTP API: $SKEIN_HTTP_TOKEN, else gateway.http_token
// of the config (configured), else the token in $SKEIN_HOME/http.token, made on first use (0600
// in a 0700 folder). path is the file's path when the token lives in one.
func HTTPToken(home, configured string) (token, path string, err error) {
	if v := os.Getenv(HTTPTokenEnv); v != "" {
		return checkToken(v, "$"+HTTPTokenEnv)
	}
	if configured != "" {
		return checkToken(configured, "gateway.http_token")
	}
	if home == "" {
		return "", "", fmt.Errorf("HTTP API: no bearer token: set $%s or gateway.http_token, or give the gateway a $SKEIN_HOME to keep %s in", HTTPTokenEnv, HTTPTokenFile)
	}
	path = filepath.Join(home, HTTPTokenFile)
	if b, err := os.ReadFile(path); err == nil {
		tok, _, err := checkToken(strings.TrimSpace(string(b)), path)
		return tok, path, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("HTTP API token: %w", err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", "", fmt.Errorf("HTTP API token: %w", err)
	}
	if token, err = newHTTPToken(); err != nil {
		return "", "", err
	}
	// Two callers starting at once (the gateway and `skein up` saying where the token is, or
	// two processes) agree on the first one's token.
	created, err := createWhole(path, token+"\n")
	if err != nil {
		return "", "", fmt.Errorf("HTTP API token: %w", err)
	}
	if !created {
		return HTTPToken(home, configured)
	}
	return token, path, nil
}

// createWhole writes content to a new file at path (0600, as CreateTemp makes it) unless one exists (created false). The
// file appears whole or not at all: it is written aside and linked into place, so a reader never
// finds it empty or half written (a file created and then written could be read in between).
func createWhole(path, content string) (created bool, err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// newHTTPToken is 32 random bytes, hex, behind skh_ (a prefix redaction knows).
func newHTTPToken() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("HTTP API token: %w", err)
	}
	return "skh_" + hex.EncodeToString(raw), nil
}

// HTTPTokenEnvFile is the file `skein creds` writes for the gateways of a deployment: one
// SKEIN_HTTP_TOKEN=<token> line, the form compose's env_file and `kubectl create secret generic
// --from-env-file` read, so every gateway replica behind one address holds the same token.
const HTTPTokenEnvFile = "http.env"

// EnsureHTTPTokenEnv writes dir/http.env (0600) with a new token unless the file exists, and
// checks the one that does: kept, like the credentials beside it, so re-running `skein creds`
// does not lock out every client.
func EnsureHTTPTokenEnv(dir string) (path string, err error) {
	path = filepath.Join(dir, HTTPTokenEnvFile)
	if st, err := os.Stat(path); err == nil {
		if st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("HTTP API token file %s is readable by others (mode %04o): run chmod 600 %s", path, st.Mode().Perm(), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("HTTP API token: %w", err)
		}
		tok, ok := strings.CutPrefix(strings.TrimSpace(string(b)), HTTPTokenEnv+"=")
		if !ok {
			return "", fmt.Errorf("HTTP API token file %s: want one line %s=<token>; delete it to make a new one", path, HTTPTokenEnv)
		}
		if _, _, err := checkToken(tok, path); err != nil {
			return "", err
		}
		return path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("HTTP API token: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("HTTP API token: %w", err)
	}
	tok, err := newHTTPToken()
	if err != nil {
		return "", err
	}
	created, err := createWhole(path, HTTPTokenEnv+"="+tok+"\n")
	if err != nil {
		return "", fmt.Errorf("HTTP API token: %w", err)
	}
	if !created {
		return EnsureHTTPTokenEnv(dir)
	}
	return path, nil
}

func checkToken(tok, where string) (string, string, error) {
	if len(tok) < minTokenLen {
		return "", "", fmt.Errorf("HTTP API token from %s is %d characters; use at least %d random ones", where, len(tok), minTokenLen)
	}
	return tok, "", nil
}

// httpError is every rejection of the API: the status of code (protocol's table) and the body
// {"error": msg, "code": code}.
func httpError(w http.ResponseWriter, code protocol.Code, msg string) {
	writeJSON(w, code.HTTPStatus(), protocol.APIError{Error: msg, Code: code})
}

// httpRefuse answers err with its code (bus.Classify: a coded error's, a full store's, a
// deadline's; internal for anything else).
func httpRefuse(w http.ResponseWriter, err error) {
	httpError(w, bus.Classify(err), err.Error())
}

// pathID reads the path's {id} as an identifier of kind k, answering a malformed or too long
// one itself (400, 413): every id ends up in a subject or a key, and one the server refuses
// would cost the gateway its connection.
func pathID(w http.ResponseWriter, r *http.Request, k protocol.ID) (string, bool) {
	id := r.PathValue("id")
	if err := k.Check(id); err != nil {
		httpRefuse(w, err)
		return "", false
	}
	return id, true
}

// guard is the API's front door: cross-site refusal, bearer token, JSON bodies only.
type guard struct {
	tokenSum [32]byte // sha256 of the token, so the comparison is constant-time on equal lengths
	hasToken bool
	streams  *streamLimiter
}

// Guard puts the API's front door (cross-site refusal, bearer token, JSON bodies only) before
// another HTTP service that answers with the gateway's token: `skein mcp serve --http`.
func Guard(token string, next http.Handler) http.Handler {
	all := http.NewServeMux()
	all.Handle("/", next) // next routes for itself
	return newGuard(token, 0).wrap(all)
}

func newGuard(token string, maxStreams int) *guard {
	g := &guard{hasToken: token != "", streams: newStreamLimiter(maxStreams)}
	if g.hasToken {
		g.tokenSum = sha256.Sum256([]byte(token))
	}
	return g
}

// wrap puts the guard in front of the API's routes: what no route serves is answered here (405
// with Allow for a known path, else 404), so a body check never answers for a route that does
// not exist.
func (g *guard) wrap(routes *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg, bad := crossSite(r); bad {
			httpError(w, protocol.CodeForbidden, msg)
			return
		}
		if !g.hasToken {
			httpError(w, protocol.CodeUnavailable, "the HTTP API has no bearer token configured; see docs/security.md")
			return
		}
		if !g.authorized(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="skein"`)
			httpError(w, protocol.CodeUnauthorized,
				"missing or wrong bearer token: send Authorization: Bearer <token> (the token is in $SKEIN_HOME/"+HTTPTokenFile+", or $"+HTTPTokenEnv+")")
			return
		}
		if _, pattern := routes.Handler(r); pattern == "" {
			httpNoRoute(routes, w, r)
			return
		}
		// Only a body that is there must say it is JSON: an optional body may be left out whole.
		if r.ContentLength != 0 {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				httpError(w, protocol.CodeUnsupportedMedia,
					fmt.Sprintf("request body must be application/json, got Content-Type %q", r.Header.Get("Content-Type")))
				return
			}
		}
		routes.ServeHTTP(w, r)
	})
}

// authorized reports whether header is the bearer token; the scheme's name is read in any case
// (RFC 9110, section 11.1).
func (g *guard) authorized(header string) bool {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenSum[:]) == 1
}

// crossSite refuses requests a browser made on behalf of another site: a page elsewhere must
// not be able to drive the API with a token it does not know, nor probe it. Non-browser clients
// send neither header and pass.
func crossSite(r *http.Request) (string, bool) {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "cross-site browser request refused (Sec-Fetch-Site: " + site + ")", true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "", false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return "cross-origin request refused (Origin " + strconv.Quote(origin) + " is not " + strconv.Quote(r.Host) + ")", true
	}
	return "", false
}

// streamLimiter caps open event streams per client (its remote IP: every client holds the same
// token, so the token does not tell them apart).
type streamLimiter struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

func newStreamLimiter(max int) *streamLimiter {
	if max <= 0 {
		max = DefaultMaxEventStreams
	}
	return &streamLimiter{max: max, open: map[string]int{}}
}

// acquire takes a stream slot for r's client; release gives it back.
func (l *streamLimiter) acquire(r *http.Request) (release func(), ok bool) {
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[client] >= l.max {
		return nil, false
	}
	l.open[client]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[client]--; l.open[client] <= 0 {
			delete(l.open, client)
		}
	}, true
}

// httpNoRoute answers what no route matched: 405 with the methods the path takes (Allow), or
// 404 when no method does.
func httpNoRoute(routes *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := routes.Handler(probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	if allow != nil {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		httpError(w, protocol.CodeMethodNotAllowed, r.Method+" "+r.URL.Path+" is not allowed; use "+strings.Join(allow, " or "))
		return
	}
	httpError(w, protocol.CodeNotFound, "no such endpoint "+strconv.Quote(r.URL.Path)+"; see GET /v1/openapi.json")
}
