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
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks", g.httpSubmit)
	mux.HandleFunc("GET /v1/sessions/{id}", g.httpSession)
	mux.HandleFunc("GET /v1/sessions/{id}/events", g.httpEvents)
	return mux
}

func (g *Gateway) serveHTTP(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway http: %w", err)
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
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
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf(
				"request body over %d bytes; a task may be at most %d bytes (put large inputs in a file a tool can read)", tooLarge.Limit, protocol.MaxTaskBytes)})
			return
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "malformed request body: " + err.Error()})
		return
	}
	rep, err := g.Submit(r.Context(), protocol.SubmitRequest{Task: in.Task, Agent: in.Agent, SessionID: in.SessionID, Caller: "http"})
	if err != nil {
		// 422: the task is refused as it is; 503: the mesh could not take it now, try again.
		status := http.StatusServiceUnavailable
		if errors.Is(err, ErrRejected) {
			status = http.StatusUnprocessableEntity
		}
		writeJSON(w, status, map[string]string{"error": err.Error(), "code": ErrorCode(err)})
		return
	}
	writeJSON(w, http.StatusAccepted, rep)
}

// lookup answers the request itself (and returns false) when the session id is bad or unknown.
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request) (protocol.Session, bool) {
	var s protocol.Session
	id := r.PathValue("id")
	if !protocol.ValidToken(id) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad session id " + strconv.Quote(id)})
		return s, false
	}
	entry, err := g.sessions.Get(r.Context(), id)
	if err != nil {
		if bus.IsNotFound(err) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no session " + id})
			return s, false
		}
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return s, false
	}
	if err := protocol.Unmarshal(entry.Value(), &s); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
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
	fl, ok := w.(http.Flusher)
	if !ok {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "streaming unsupported"})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	_ = trace.Follow(ctx, g.d.Conn.JS, g.d.Names, id, func(ev protocol.Event) bool {
		data, err := json.Marshal(ev)
		if err != nil {
			return true
		}
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, data)
		fl.Flush()
		if ev.Type != protocol.EvUsage || ev.Role == protocol.RoleMiner {
			return ev.Type != protocol.EvUsage
		}
		// The planner's usage ends the work; when a miner will mine the session, its mined and
		// usage events are the session's last, so the stream waits for them (bounded).
		if !g.minerExpected(ctx) {
			return false
		}
		time.AfterFunc(minerWait, cancel)
		return true
	})
}

// minerWait bounds how long an event stream waits for the miner to close a finished session.
const minerWait = 60 * time.Second

// minerExpected reports whether a miner will close sessions: mining is on in the config and
// memoryd answers (one try: a mesh without memoryd mines nothing).
func (g *Gateway) minerExpected(ctx context.Context) bool {
	if c := g.d.Config; c == nil || !c.Miner.Enabled || !c.Memory.Enabled {
		return false
	}
	data, err := protocol.Marshal(&protocol.MemoryHealthRequest{})
	if err != nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	msg, err := g.d.Conn.NC.RequestWithContext(hctx, g.d.Names.Memory(protocol.MemHealth), data)
	if err != nil {
		return false
	}
	var rep protocol.MemoryHealthReply
	return protocol.Unmarshal(msg.Data, &rep) == nil && rep.OK
}
