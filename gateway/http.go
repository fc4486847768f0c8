package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/skein-mesh/skein/gateway/console"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// Handler is the HTTP API:
//
//	POST /v1/tasks                  {"task": "...", "agent"?: "...", "session_id"?: "..."} → 202 {"session_id"}
//	GET  /v1/sessions/{id}          the session's state
//	GET  /v1/sessions/{id}/events   the trace as server-sent events, until the usage event, with
//	                                the model's text as it is generated (event: delta)
//	POST /v1/sessions/{id}/cancel   {"reason"?: "..."} → 200 CancelReply (a finished session: no_op)
//	GET  /v1/sessions/{id}/tree     the session with its steps and child sessions (docs/json.md)
//	POST /v1/sessions/{id}/messages {"text": "...", "turn_id"?: "..."} → 202 {"session_id"} of the conversation's next turn
//	POST /v1/sessions/{id}/fork     {"text": "...", "session_id"?: "..."} → 202 {"session_id"} of a new conversation from turn {id}
//	GET  /v1/sessions               ?since=&limit=&agent=&status=&q= → {"sessions": [SessionRow], "truncated"}
//	GET  /v1/usage                  ?since=&limit= → {"since", "sessions": [SessionUsage], "truncated"}
//	GET  /v1/dlq                    ?since=&limit= → [DeadLetter]
//	GET  /v1/memory                 ?agent=&tier=&status=&offset=&limit= → MemoryListReply
//	GET  /v1/memory/search          ?q=&agent=&tier=&top_k= → MemoryInspectReply (ranked as retrieval ranks)
//	GET  /v1/memory/{id}            one entry
//	POST /v1/memory/{id}/retire     {"evict"?: bool, "reason"?: "..."} → MemoryRetireReply
//	GET  /v1/health                 whether the mesh takes new sessions: its store's state, memoryd's health
//	GET  /v1/openapi.json           the OpenAPI document of all this (openapi.go, docs/openapi.json)
//
// The console (package console) is served beside it at /console/, and its icon at /favicon.ico,
// outside the token check: its files are public; every request it makes carries the token like
// any other client's.
//
// Every request needs the bearer token; a body, where one is sent, must be application/json;
// browsers' cross-site requests are refused; each rejection is {"error", "code"} (see httpsec.go).
func (g *Gateway) Handler() http.Handler {
	mux := newRouteMux(&g.patterns) // docs/openapi.json must describe every route (openapi.go)
	mux.HandleFunc("GET /v1/openapi.json", g.httpOpenAPI)
	mux.HandleFunc("GET /v1/health", g.httpHealth)
	mux.HandleFunc("POST /v1/tasks", g.httpSubmit)
	mux.HandleFunc("GET /v1/sessions/{id}", g.httpSession)
	mux.HandleFunc("GET /v1/sessions/{id}/events", g.httpEvents)
	mux.HandleFunc("POST /v1/sessions/{id}/cancel", g.httpCancel)
	mux.HandleFunc("GET /v1/sessions/{id}/tree", g.httpTree)
	mux.HandleFunc("POST /v1/sessions/{id}/messages", g.httpMessage)
	mux.HandleFunc("POST /v1/sessions/{id}/fork", g.httpFork)
	mux.HandleFunc("GET /v1/sessions", g.httpSessions)
	mux.HandleFunc("GET /v1/usage", g.httpUsage)
	mux.HandleFunc("GET /v1/dlq", g.httpDLQ)
	mux.HandleFunc("GET /v1/memory", g.httpMemoryList)
	mux.HandleFunc("GET /v1/memory/search", g.httpMemorySearch)
	mux.HandleFunc("GET /v1/memory/{id}", g.httpMemoryGet)
	mux.HandleFunc("POST /v1/memory/{id}/retire", g.httpMemoryRetire)
	root := http.NewServeMux()
	root.Handle("/console/", console.Handler())
	root.Handle("GET /favicon.ico", console.Favicon())
	root.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusFound))
	root.Handle("/", g.guard.wrap(mux.ServeMux)) // answers 404 and 405 itself, in JSON
	return root
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
	if m, ok := v.(protocol.Message); ok {
		protocol.Stamp(m) // a message says its schema version, as on NATS
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (g *Gateway) httpSubmit(w http.ResponseWriter, r *http.Request) {
	var in protocol.TaskBody
	if !decodeBody(w, r, protocol.MaxTaskBytes+4096, false, &in) {
		return
	}
	rep, err := g.Submit(r.Context(), protocol.SubmitRequest{Task: in.Task, Agent: in.Agent, SessionID: in.SessionID, Caller: "http", Budget: in.Budget})
	if err != nil {
		// 422: the task is refused as it is; 400/413: an id is malformed or too long; 503: the
		// mesh could not take it now (transient, storage_full), try again.
		httpError(w, ErrorCode(err), err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, &rep)
}

// lookup answers the request itself (and returns false) when the session id is bad or unknown.
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request) (protocol.Session, bool) {
	var s protocol.Session
	id, ok := pathID(w, r, protocol.IDSession)
	if !ok {
		return s, false
	}
	entry, err := g.sessions.Get(r.Context(), id)
	if err != nil {
		if bus.IsNotFound(err) {
			httpError(w, protocol.CodeNotFound, "no session "+id)
			return s, false
		}
		httpRefuse(w, err)
		return s, false
	}
	if err := protocol.Unmarshal(entry.Value(), &s); err != nil {
		httpRefuse(w, err)
		return s, false
	}
	return s, true
}

func (g *Gateway) httpSession(w http.ResponseWriter, r *http.Request) {
	if s, ok := g.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, &s)
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
		httpError(w, protocol.CodeTooMany, fmt.Sprintf(
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
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if err := rc.Flush(); err != nil {
		return
	}
	// Trace events and deltas (the model's text as it is generated, from now on: deltas are kept
	// nowhere) come from two subscriptions; one writer at a time, and none once the handler has
	// returned (a delta callback may still be running when the subscription ends).
	var mu sync.Mutex
	closed := false
	defer func() {
		mu.Lock()
		closed = true
		mu.Unlock()
	}()
	send := func(typ string, v any) bool {
		data, err := json.Marshal(v)
		if err != nil {
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(httpTimeouts.write))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data); err != nil {
			cancel()
			return false
		}
		if rc.Flush() != nil {
			cancel()
			return false
		}
		return true
	}
	sub, err := delta.Follow(g.d.Conn.NC, g.d.Names, id, func(d protocol.Delta) {
		if ctx.Err() == nil {
			send(protocol.SSEDelta, &d)
		}
	})
	if err != nil {
		g.d.Logger.Warn("event stream without deltas: the answers show when each turn ends", "session", id, "err", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	_ = trace.Follow(ctx, g.d.Conn.JS, g.d.Names, id, func(ev protocol.Event) bool {
		if !send(string(ev.Type), ev) {
			return false
		}
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

func (g *Gateway) httpCancel(w http.ResponseWriter, r *http.Request) {
	if _, ok := g.lookup(w, r); !ok {
		return
	}
	var in protocol.CancelBody
	if !decodeBody(w, r, smallBodyBytes, true, &in) {
		return
	}
	rep, err := g.Cancel(r.Context(), protocol.CancelRequest{SessionID: r.PathValue("id"), Reason: in.Reason, By: "http " + r.RemoteAddr})
	if err != nil {
		httpRefuse(w, err)
		return
	}
	writeJSON(w, http.StatusOK, &rep)
}

func (g *Gateway) httpTree(w http.ResponseWriter, r *http.Request) {
	if _, ok := g.lookup(w, r); !ok {
		return
	}
	ctx := r.Context()
	n, err := trace.Tree(ctx, g.d.Conn.JS, g.d.Names, r.PathValue("id"), func(id string) []string {
		e, err := g.sessions.Get(ctx, id)
		if err != nil {
			return nil
		}
		var s protocol.Session
		if protocol.Unmarshal(e.Value(), &s) != nil {
			return nil
		}
		return s.Children
	})
	if err != nil {
		httpError(w, protocol.CodeNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// httpMessage continues a finished session's conversation with a new turn.
func (g *Gateway) httpMessage(w http.ResponseWriter, r *http.Request) {
	s, ok := g.lookup(w, r)
	if !ok {
		return
	}
	var in protocol.MessageBody
	if !decodeBody(w, r, protocol.MaxTaskBytes+4096, false, &in) {
		return
	}
	turn := in.TurnID
	if turn == "" {
		turn = NewTurnID() // a POST without a turn id is a new message, whatever its text
	}
	rep, err := g.Submit(r.Context(), protocol.SubmitRequest{Task: in.Text, Agent: s.Agent, SessionID: s.SessionID, Caller: "http", Budget: in.Budget,
		TurnID: turn})
	if err != nil {
		// 422: the turn is refused as it is; 503: the mesh could not take it now, try again.
		httpError(w, ErrorCode(err), err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, &rep)
}

// httpFork starts a new conversation from turn {id}.
func (g *Gateway) httpFork(w http.ResponseWriter, r *http.Request) {
	s, ok := g.lookup(w, r)
	if !ok {
		return
	}
	var in protocol.ForkBody
	if !decodeBody(w, r, protocol.MaxTaskBytes+4096, false, &in) {
		return
	}
	rep, err := g.Submit(r.Context(), protocol.SubmitRequest{Task: in.Text, Agent: s.Agent, SessionID: in.SessionID, From: s.SessionID,
		Caller: "http", Budget: in.Budget})
	if err != nil {
		httpError(w, ErrorCode(err), err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, &rep)
}
