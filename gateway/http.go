package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Handler is the HTTP API:
//
//	POST /v1/tasks                  {"task": "...", "agent"?: "...", "session_id"?: "..."} → 202 {"session_id"}
//	GET  /v1/sessions/{id}          the session's state
//	GET  /v1/sessions/{id}/events   the trace as server-sent events, until the usage event
//
// Every request needs the bearer token; bodies must be application/json; browsers' cross-site
// requests are refused; each rejection is {"error", "code"} (see httpsec.go).
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks", g.httpSubmit)
	mux.HandleFunc("GET /v1/sessions/{id}", g.httpSession)
	mux.HandleFunc("GET /v1/sessions/{id}/events", g.httpEvents)
	mux.HandleFunc("/", httpNoRoute) // JSON, not the mux's plain-text 404 and 405
	return g.guard.wrap(mux)
}

func (g *Gateway) serveHTTP(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway http: %w", err)
	}
	return g.serveListener(ctx, ln)
}

// serveListener serves the API on ln until ctx ends: the server that --http runs.
func (g *Gateway) serveListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: httpTimeouts.readHeader,
		ReadTimeout:       httpTimeouts.read,
		WriteTimeout:      httpTimeouts.write, // the event stream lifts it and sets one per event
		IdleTimeout:       httpTimeouts.idle,
		MaxHeaderBytes:    64 << 10,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway http: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (g *Gateway) httpSubmit(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Task      string `json:"task"`
		Agent     string `json:"agent"`
		SessionID string `json:"session_id"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, protocol.MaxTaskBytes+4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httpError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf(
				"request body over %d bytes; a task may be at most %d bytes (put large inputs in a file a tool can read)", tooLarge.Limit, protocol.MaxTaskBytes))
			return
		}
		httpError(w, http.StatusBadRequest, "bad_request", "malformed request body: "+err.Error())
		return
	}
	rep, err := g.Submit(r.Context(), protocol.SubmitRequest{Task: in.Task, Agent: in.Agent, SessionID: in.SessionID, Caller: "http"})
	if err != nil {
		status, code := http.StatusInternalServerError, "internal"
		if errors.Is(err, ErrRejected) {
			status, code = http.StatusUnprocessableEntity, "rejected"
		}
		httpError(w, status, code, err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, rep)
}

// lookup answers the request itself (and returns false) when the session id is bad or unknown.
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request) (protocol.Session, bool) {
	var s protocol.Session
	id := r.PathValue("id")
	if !protocol.ValidToken(id) {
		httpError(w, http.StatusBadRequest, "bad_request", "bad session id "+strconv.Quote(id))
		return s, false
	}
	entry, err := g.sessions.Get(r.Context(), id)
	if err != nil {
		if bus.IsNotFound(err) {
			httpError(w, http.StatusNotFound, "not_found", "no session "+id)
			return s, false
		}
		httpError(w, http.StatusInternalServerError, "internal", err.Error())
		return s, false
	}
	if err := protocol.Unmarshal(entry.Value(), &s); err != nil {
		httpError(w, http.StatusInternalServerError, "internal", err.Error())
		return s, false
	}
	return s, true
}

func (g *Gateway) httpSession(w http.ResponseWriter, r *http.Request) {
	if s, ok := g.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, s)
	}
}

func (g *Gateway) httpEvents(w http.ResponseWriter, r *http.Request) {
	// An unknown session would otherwise hold the stream open forever, waiting for events.
	if _, ok := g.lookup(w, r); !ok {
		return
	}
	id := r.PathValue("id")
	release, ok := g.guard.streams.acquire(r)
	if !ok {
		w.Header().Set("Retry-After", "5")
		httpError(w, http.StatusTooManyRequests, "too_many_streams", fmt.Sprintf(
			"this client already holds %d open event streams (gateway.max_event_streams); close one first", g.guard.streams.max))
		return
	}
	defer release()
	// The server's write timeout would cut a stream that outlives it: lift it, and bound each
	// event's write instead, so a client that stops reading is still dropped.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	_ = trace.Follow(r.Context(), g.d.Conn.JS, g.d.Names, id, func(ev protocol.Event) bool {
		data, err := json.Marshal(ev)
		if err != nil {
			return true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(httpTimeouts.write))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, data); err != nil {
			return false
		}
		if rc.Flush() != nil {
			return false
		}
		return ev.Type != protocol.EvUsage
	})
}
