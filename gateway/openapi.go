package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/protocol/contract"
	"github.com/skein-mesh/skein/pkg/trace"
)

// apiRoute documents one route of Handler for the OpenAPI document (docs/openapi.json, served
// at GET /v1/openapi.json). A test fails when a /v1/ route is served without a row here.
type apiRoute struct {
	Pattern   string // as registered: "METHOD /path"
	ID        string // operationId
	Summary   string
	Body      any // the JSON request body's type; nil: none
	Optional  bool
	Query     []queryParam // optional query parameters (httpquery.go)
	Responses []apiResponse
}

type apiResponse struct {
	Status int
	Doc    string
	Body   any  // JSON reply type; nil: APIError
	Events bool // text/event-stream of Body
	// Also is a second type of event in the stream (its data is one of Body and Also).
	Also any
}

// codeDocs says what each code an API route answers with means there. The status of each is
// its code's (protocol's table): errs groups the codes of a route by status.
var codeDocs = map[protocol.Code]string{
	protocol.CodeBadRequest:       "the body does not match its schema, or an id or a parameter cannot be read",
	protocol.CodeNotFound:         "no such session, memory entry or route",
	protocol.CodeTooLarge:         "the body, an id or a search text is over its limit",
	protocol.CodeRejected:         "the task is refused as it is (sending it again will not help)",
	protocol.CodeTooMany:          "this client holds gateway.max_event_streams streams already",
	protocol.CodeTransient:        "the mesh could not take it now (try again)",
	protocol.CodeStorageFull:      "the mesh's store cannot take it now (try again once space is freed; GET /v1/health says why)",
	protocol.CodeUnavailable:      "memoryd is not serving, or the API has no token configured",
	protocol.CodeTimeout:          "memoryd did not answer in time",
	protocol.CodeInternal:         "the gateway, or memoryd, failed; the error says where",
	protocol.CodeUnauthorized:     "missing or wrong bearer token",
	protocol.CodeForbidden:        "a browser's cross-site request",
	protocol.CodeUnsupportedMedia: "the body is not application/json",
}

// errs are the error responses of codes, one per status, each naming its codes.
func errs(codes ...protocol.Code) []apiResponse {
	var out []apiResponse
	byStatus := map[int]int{} // status -> index in out
	for _, c := range codes {
		doc := fmt.Sprintf("%s: %s", c, codeDocs[c])
		if i, ok := byStatus[c.HTTPStatus()]; ok {
			out[i].Doc += "; " + doc
			continue
		}
		byStatus[c.HTTPStatus()] = len(out)
		out = append(out, apiResponse{Status: c.HTTPStatus(), Doc: doc})
	}
	return out
}

// Codes that routes share: an id in the path, the session or entry it names, and memoryd behind a route.
var (
	idCodes     = []protocol.Code{protocol.CodeBadRequest, protocol.CodeTooLarge}
	namedCodes  = with(idCodes, protocol.CodeNotFound)
	memoryCodes = []protocol.Code{protocol.CodeInternal, protocol.CodeUnavailable, protocol.CodeTimeout}
)

// with is a list of codes and more codes, in a new slice.
func with(codes []protocol.Code, more ...protocol.Code) []protocol.Code {
	return append(append([]protocol.Code(nil), codes...), more...)
}

var apiRoutes = []apiRoute{
	{Pattern: "POST /v1/tasks", ID: "submitTask", Summary: "Submit a task; the session runs on the mesh.", Body: protocol.TaskBody{},
		Responses: append([]apiResponse{{Status: 202, Doc: "accepted (duplicate: this session id was submitted before)", Body: protocol.SubmitReply{}}},
			errs(with(idCodes, protocol.CodeRejected, protocol.CodeTransient, protocol.CodeStorageFull)...)...)},
	{Pattern: "GET /v1/sessions/{id}", ID: "getSession", Summary: "The session's record: status, outcome, plan, lineage, cancel, budget.",
		Responses: append([]apiResponse{{Status: 200, Doc: "the session", Body: protocol.Session{}}}, errs(with(namedCodes, protocol.CodeInternal)...)...)},
	{Pattern: "GET /v1/sessions/{id}/events", ID: "streamEvents", Summary: "The session's trace as server-sent events (`event: <type>`, `data: <Event>`), from the first event until the last usage event; " +
		"between them, from the moment of the request on, the model's text as it is generated (`event: delta`, `data: <Delta>`: kept nowhere, so an earlier turn's text comes only with its trace events).",
		Responses: append([]apiResponse{{Status: 200, Doc: "one server-sent event per trace event, and one per batch of streamed text (delta)", Body: protocol.Event{}, Events: true, Also: protocol.Delta{}}}, errs(with(namedCodes, protocol.CodeTooMany, protocol.CodeInternal)...)...)},
	{Pattern: "POST /v1/sessions/{id}/cancel", ID: "cancelSession", Summary: "Cancel the session and its child sessions; a session that already ended is a no-op.",
		Body: protocol.CancelBody{}, Optional: true,
		Responses: append([]apiResponse{{Status: 200, Doc: "cancelling, already_cancelled or already_finished", Body: protocol.CancelReply{}}}, errs(with(namedCodes, protocol.CodeInternal)...)...)},
	{Pattern: "GET /v1/sessions/{id}/tree", ID: "sessionTree", Summary: "The session with its steps and child sessions, recursively, with tokens, cost and wall time per node.",
		Responses: append([]apiResponse{{Status: 200, Doc: "the tree", Body: trace.TreeNode{}}}, errs(namedCodes...)...)},
	{Pattern: "POST /v1/sessions/{id}/messages", ID: "continueConversation", Summary: "Continue a finished session's conversation with a new turn: every message is a new turn, unless it carries the turn_id of the conversation's latest turn (a retry, answered with that turn, duplicate: true).", Body: protocol.MessageBody{},
		Responses: append([]apiResponse{{Status: 202, Doc: "the next turn's session", Body: protocol.SubmitReply{}}}, errs(with(namedCodes, protocol.CodeRejected, protocol.CodeTransient, protocol.CodeStorageFull)...)...)},
	{Pattern: "POST /v1/sessions/{id}/fork", ID: "forkConversation", Summary: "Start a new conversation that continues the transcript of turn {id} (any finished turn), with text as its first message; the conversation {id} belongs to is not touched. The new session's record and tree name the turn in forked_from.", Body: protocol.ForkBody{},
		Responses: append([]apiResponse{{Status: 202, Doc: "the new conversation's first session (duplicate: this session_id forked before)", Body: protocol.SubmitReply{}}}, errs(with(namedCodes, protocol.CodeRejected, protocol.CodeTransient, protocol.CodeStorageFull)...)...)},
	{Pattern: "GET /v1/health", ID: "health", Summary: "Whether the mesh takes new sessions: the state of its store (ok, low: under mesh.storage_reserve, full: JetStream cannot write) with the reason and what to do, and memoryd's health.",
		Responses: []apiResponse{{Status: 200, Doc: "the mesh takes new sessions", Body: Health{}},
			{Status: 503, Doc: "the mesh refuses new sessions (storage low or full); the same body says why", Body: Health{}}}},
	{Pattern: "GET /v1/openapi.json", ID: "openapi", Summary: "This document.",
		Responses: []apiResponse{{Status: 200, Doc: "the OpenAPI document", Body: struct{}{}}}},
	{Pattern: "GET /v1/sessions", ID: "listSessions", Summary: "Sessions updated within `since` (a duration, default 168h), newest first, at most `limit` (1..2000, default 200); `agent`, `status` (status or outcome) and `q` (substring of id or task) filter.",
		Query:     []queryParam{qSince, qListLimit, qAgent, qStatus, qText},
		Responses: append([]apiResponse{{Status: 200, Doc: "the sessions", Body: SessionList{}}}, errs(with(idCodes, protocol.CodeInternal)...)...)},
	{Pattern: "GET /v1/usage", ID: "listUsage", Summary: "Each session's last usage report within `since`, oldest first, with each model's cost.",
		Query:     []queryParam{qSince, qListLimit},
		Responses: append([]apiResponse{{Status: 200, Doc: "the usage reports", Body: UsageList{}}}, errs(protocol.CodeBadRequest, protocol.CodeInternal)...)},
	{Pattern: "GET /v1/dlq", ID: "listDeadLetters", Summary: "The newest dead letters within `since`, with their origin and reason.",
		Query:     []queryParam{qSince, qListLimit},
		Responses: append([]apiResponse{{Status: 200, Doc: "the dead letters", Body: []DeadLetter{}}}, errs(protocol.CodeBadRequest, protocol.CodeInternal)...)},
	{Pattern: "GET /v1/memory", ID: "listMemory", Summary: "Memory entries by `agent`, `kind` (guideline, the default, case, skill or all), `tier`, `status` (active, superseded, retired, quarantined or all), paged by `offset` and `limit` (at most 200).",
		Query:     []queryParam{qAgent, qKind, qTier, qMemStatus, qOffset, qMemLimit},
		Responses: append([]apiResponse{{Status: 200, Doc: "the entries", Body: protocol.MemoryListReply{}}}, errs(with(idCodes, memoryCodes...)...)...)},
	{Pattern: "GET /v1/memory/search", ID: "searchMemory", Summary: "Counts per agent, kind, tier and status, and the entries nearest `q` ranked as retrieval ranks them (`kind` narrows them: guideline, case, skill or all, the default; `top_k` 1..100).",
		Query:     []queryParam{qText, qAgent, qKind, qTier, qTopK},
		Responses: append([]apiResponse{{Status: 200, Doc: "counts and ranked hits", Body: protocol.MemoryInspectReply{}}}, errs(with(idCodes, memoryCodes...)...)...)},
	{Pattern: "GET /v1/memory/{id}", ID: "getMemoryEntry", Summary: "One memory entry.",
		Responses: append([]apiResponse{{Status: 200, Doc: "the entry", Body: protocol.MemoryEntry{}}}, errs(with(namedCodes, memoryCodes...)...)...)},
	{Pattern: "POST /v1/memory/{id}/retire", ID: "retireMemoryEntry", Summary: "Take an entry out of retrieval: retire it (kept and listed) or, with evict, delete it.",
		Body: RetireBody{}, Optional: true,
		Responses: append([]apiResponse{{Status: 200, Doc: "retired or evicted", Body: protocol.MemoryRetireReply{}}}, errs(with(namedCodes, memoryCodes...)...)...)},
}

var (
	openAPIOnce sync.Once
	openAPIDoc  []byte
	openAPIErr  error
)

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API, as kept in docs/openapi.json.
func OpenAPI() ([]byte, error) {
	openAPIOnce.Do(func() { openAPIDoc, openAPIErr = buildOpenAPI() })
	return openAPIDoc, openAPIErr
}

func buildOpenAPI() ([]byte, error) {
	values := []any{protocol.APIError{}}
	for _, r := range apiRoutes {
		if r.Body != nil {
			values = append(values, r.Body)
		}
		for _, rs := range r.Responses {
			if rs.Also != nil {
				values = append(values, rs.Also)
			}
			if rs.Body == nil {
				continue
			}
			if t := reflect.TypeOf(rs.Body); t.Kind() == reflect.Slice {
				values = append(values, reflect.Zero(t.Elem()).Interface())
			} else if t.Name() != "" {
				values = append(values, rs.Body)
			}
		}
	}
	schemas, err := contract.Schemas(values...)
	if err != nil {
		return nil, err
	}
	ref := func(v any) map[string]any {
		if v == nil {
			v = protocol.APIError{}
		}
		t := reflect.TypeOf(v)
		if t.Kind() == reflect.Slice {
			return map[string]any{"type": "array", "items": map[string]any{"$ref": contract.SchemaRef + t.Elem().Name()}}
		}
		name := t.Name()
		if name == "" {
			return map[string]any{"type": "object"}
		}
		return map[string]any{"$ref": contract.SchemaRef + name}
	}
	paths := map[string]map[string]any{}
	for _, r := range apiRoutes {
		method, path, ok := strings.Cut(r.Pattern, " ")
		if !ok {
			return nil, fmt.Errorf("openapi: route %q has no method", r.Pattern)
		}
		op := map[string]any{"operationId": r.ID, "summary": r.Summary}
		var params []any
		if strings.Contains(path, "{id}") {
			kind := protocol.IDSession
			if strings.HasPrefix(path, "/v1/memory/") {
				kind = protocol.IDMemory
			}
			params = append(params, map[string]any{"name": "id", "in": "path", "required": true, "description": kind.Doc(),
				"schema": idSchema(kind)})
		}
		for _, q := range r.Query {
			params = append(params, map[string]any{"name": q.name(), "in": "query", "required": false, "description": q.doc(), "schema": q.schema()})
		}
		if params != nil {
			op["parameters"] = params
		}
		if r.Body != nil {
			op["requestBody"] = map[string]any{"required": !r.Optional,
				"content": map[string]any{"application/json": map[string]any{"schema": ref(r.Body)}}}
		}
		responses := map[string]any{}
		all := append(append([]apiResponse{}, r.Responses...), errs(protocol.CodeUnauthorized, protocol.CodeForbidden)...)
		if r.Body != nil {
			all = append(all, errs(protocol.CodeUnsupportedMedia)...)
		}
		for _, rs := range all {
			ct := "application/json"
			if rs.Events {
				ct = "text/event-stream"
			}
			doc := rs.Doc
			if doc == "" {
				doc = http.StatusText(rs.Status)
			}
			schema := ref(rs.Body)
			if rs.Also != nil {
				schema = map[string]any{"oneOf": []any{schema, ref(rs.Also)}}
			}
			if rs.Events {
				schema = sseEvent(schema)
			}
			responses[strconv.Itoa(rs.Status)] = map[string]any{"description": doc,
				"content": map[string]any{ct: map[string]any{"schema": schema}}}
		}
		op["responses"] = responses
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "skein gateway HTTP API", "version": strconv.Itoa(protocol.SchemaVersion),
			"description": "Every request needs the bearer token (`Authorization: Bearer <token>`; `skein up --http` says where it is). " +
				"A body, where one is sent, is application/json and must match its schema here (unknown fields, names in another case and null where the schema has none are refused; an optional body may be left out). " +
				"A query parameter that is given must have a value (leave it out for the default). Every refusal is an APIError {error, code}, " +
				"with the HTTP status of its code (the table of codes, their statuses and whether to retry is in docs/contract.md). " +
				"Replies that are mesh messages carry \"v\", the schema version (docs/asyncapi.json describes the NATS side)."},
		"security":   []any{map[string]any{"bearer": []any{}}},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// sseEvent is the schema of one server-sent event whose data is JSON of schema data: before
// OpenAPI 3.2 (itemSchema), a text/event-stream's schema describes each event as an object of
// its fields (the convention 3.2 writes down, and the one schemathesis reads).
func sseEvent(data map[string]any) map[string]any {
	return map[string]any{"type": "object", "required": []string{"event", "data"}, "properties": map[string]any{
		"event": map[string]any{"type": "string"},
		"data":  map[string]any{"type": "string", "contentMediaType": "application/json", "contentSchema": data},
	}}
}

// idSchema is the JSON Schema of an identifier of kind k.
func idSchema(k protocol.ID) map[string]any {
	return map[string]any{"type": "string", "minLength": 1, "maxLength": k.Max, "pattern": k.Pattern()}
}

func (g *Gateway) httpOpenAPI(w http.ResponseWriter, r *http.Request) {
	doc, err := OpenAPI()
	if err != nil {
		httpRefuse(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

// routeMux is the API's ServeMux that remembers its patterns, so a test can hold the route
// table against the OpenAPI document.
type routeMux struct {
	*http.ServeMux
	patterns *[]string
}

func newRouteMux(patterns *[]string) routeMux {
	*patterns = (*patterns)[:0]
	return routeMux{ServeMux: http.NewServeMux(), patterns: patterns}
}

func (m routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	*m.patterns = append(*m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

func (m routeMux) Handle(pattern string, h http.Handler) {
	*m.patterns = append(*m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// routes are the patterns Handler registered, sorted.
func (g *Gateway) routes() []string {
	g.Handler()
	out := append([]string(nil), g.patterns...)
	sort.Strings(out)
	return out
}
