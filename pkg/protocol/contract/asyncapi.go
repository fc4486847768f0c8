package contract

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Kind is how a channel carries its messages.
type Kind string

const (
	// Service: request/reply on a micro service endpoint; the reply goes to the request's inbox.
	Service Kind = "service"
	// Stream: published into a JetStream stream; read with a consumer or direct gets.
	Stream Kind = "stream"
	// Notice: plain publish, read by subscribers (not kept).
	Notice Kind = "notice"
	// Bucket: the values of a JetStream KV bucket, one per key.
	Bucket Kind = "kv"
)

// Channel is one subject (pattern) of the mesh and the messages on it.
type Channel struct {
	ID string
	// Address is the subject with {parameters} for its variable tokens, in the default namespace.
	Address string
	Params  []string
	Kind    Kind
	// Store is the stream or bucket behind a Stream or Bucket channel.
	Store string
	// JSON: the channel also takes JSON requests (Content-Type: application/json).
	JSON    bool
	Message any
	Reply   any
	Doc     string
}

// Channels is the mesh's contract on NATS. A test checks that every message type of
// pkg/protocol is on one of them.
func Channels() []Channel {
	n := protocol.NewNames("")
	mem := func(op, doc string, req, rep any) Channel {
		return Channel{ID: "memory." + op, Address: n.Memory(op), Kind: Service, Message: req, Reply: rep, Doc: doc}
	}
	kv := func(bucket, param string, v any, doc string) Channel {
		return Channel{ID: "kv." + bucket, Address: protocol.KVKey(n.Bucket(bucket), "{"+param+"}"), Params: []string{param},
			Kind: Bucket, Store: "KV_" + n.Bucket(bucket), Message: v, Doc: doc}
	}
	return []Channel{
		{ID: "submit", Address: n.Submit(), Kind: Service, JSON: true, Message: protocol.SubmitRequest{}, Reply: protocol.SubmitReply{},
			Doc: "Start a session. A refused task is answered with error and code set and the service error headers."},
		{ID: "cancel", Address: n.Cancel(), Kind: Service, JSON: true, Message: protocol.CancelRequest{}, Reply: protocol.CancelReply{},
			Doc: "Cancel a session and its child sessions. A session that already ended is a no-op (no_op, outcome)."},
		{ID: "cancel-notice", Address: n.CancelNotice("{session_id}"), Params: []string{"session_id"}, Kind: Notice, Message: protocol.CancelNotice{},
			Doc: "Broadcast when a session is cancelled, so every process working for it stops."},
		{ID: "delta", Address: n.Delta("{session_id}"), Params: []string{"session_id"}, Kind: Notice, Message: protocol.Delta{},
			Doc: "A session's model answers as they are generated, batched (about every 50 ms): plain NATS, kept nowhere. Seq numbers the pieces of one (step_id, turn); restart voids that turn's text so far; done ends it. The trace keeps the whole text: show it once the turn's events arrive."},
		{ID: "task", Address: n.Task("{agent}"), Params: []string{"agent"}, Kind: Stream, Store: n.Stream(protocol.StreamTasks), Message: protocol.Task{},
			Doc: "Accepted tasks for the planners (work queue)."},
		{ID: "work", Address: n.Work("{agent}"), Params: []string{"agent"}, Kind: Stream, Store: n.Stream(protocol.StreamWork), Message: protocol.Step{},
			Doc: "Steps for the executors of an agent (work queue)."},
		{ID: "result", Address: n.Result("{session_id}"), Params: []string{"session_id"}, Kind: Stream, Store: n.Stream(protocol.StreamResults), Message: protocol.StepResult{},
			Doc: "Step results for the planners."},
		{ID: "trace", Address: n.Trace("{session_id}"), Params: []string{"session_id"}, Kind: Stream, Store: n.Stream(protocol.StreamTrace), Message: protocol.Event{},
			Doc: "Every event of a session, in order. The last event is of type usage; a terminal event (final, incomplete, failed) carries the outcome and answer."},
		{ID: "usage", Address: n.Usage("{agent}"), Params: []string{"agent"}, Kind: Stream, Store: n.Stream(protocol.StreamUsage), Message: protocol.Event{},
			Doc: "One usage event per finished session (and one per mining), for mesh-wide accounting."},
		{ID: "tool", Address: n.Tool("{tool}"), Params: []string{"tool"}, Kind: Service, Message: protocol.ToolRequest{}, Reply: protocol.ToolReply{},
			Doc: "Call a tool, or an agent as a tool. A failed call has ok false, its kind (what went wrong, for the model) and its code (the kind's class; the service error headers say the same)."},
		{ID: "storage", Address: n.Storage(), Kind: Service, Message: protocol.StorageRequest{}, Reply: protocol.StorageReply{},
			Doc: "Whether the mesh's store can write: ok, low (free space under mesh.storage_reserve: new sessions are refused) or full (JetStream cannot write: work in flight waits). Answered by the process that runs the embedded server; nobody answers on a mesh whose NATS server is its own (its /healthz says the same)."},
		mem(protocol.MemRetrieve, "Guidelines that fit a task, strategic first.", protocol.RetrieveRequest{}, protocol.RetrieveReply{}),
		mem(protocol.MemIngest, "Add guidelines mined from a session.", protocol.IngestRequest{}, protocol.IngestReply{}),
		mem(protocol.MemRemember, "Notes written in a session (remember) and a sub-agent's findings for its caller's memory.", protocol.RememberRequest{}, protocol.RememberReply{}),
		mem(protocol.MemFeedback, "Mark retrieved entries helpful or harmful.", protocol.FeedbackRequest{}, protocol.Ack{}),
		mem(protocol.MemInspect, "Counts per agent, tier and status, and the entries nearest a query.", protocol.MemoryInspectRequest{}, protocol.MemoryInspectReply{}),
		mem(protocol.MemList, "A page of entries.", protocol.MemoryListRequest{}, protocol.MemoryListReply{}),
		mem(protocol.MemGet, "One entry.", protocol.MemoryGetRequest{}, protocol.MemoryGetReply{}),
		mem(protocol.MemImport, "Write entries (admin).", protocol.MemoryImportRequest{}, protocol.MemoryImportReply{}),
		mem(protocol.MemEvict, "Run the capacity policy now (admin).", protocol.MemoryEvictRequest{}, protocol.MemoryEvictReply{}),
		mem(protocol.MemRetire, "Take one entry out of retrieval: retire it, or evict (delete) it.", protocol.MemoryRetireRequest{}, protocol.MemoryRetireReply{}),
		mem(protocol.MemMigrate, "Re-embed every entry with the current model (admin).", protocol.MemoryMigrateRequest{}, protocol.MemoryMigrateReply{}),
		mem(protocol.MemRepair, "Make the store's search index (Milvus) hold exactly its records, and say what was found (admin).", protocol.MemoryRepairRequest{}, protocol.MemoryRepairReply{}),
		mem(protocol.MemHealth, "Whether memoryd serves, its store and model.", protocol.MemoryHealthRequest{}, protocol.MemoryHealthReply{}),
		mem(protocol.MemEmbed, "Vectors of texts with memoryd's model.", protocol.MemoryEmbedRequest{}, protocol.MemoryEmbedReply{}),
		kv(protocol.BucketSessions, "session_id", protocol.Session{}, "The state of each session."),
		kv(protocol.BucketAgents, "agent", protocol.AgentSpec{}, "The agents executors serve."),
		kv(protocol.BucketTools, "tool", protocol.ToolSpec{}, "The tool catalogue."),
		kv(protocol.BucketLedger, "session_id", protocol.LedgerEntry{}, "What each session, and each session tree's root, has spent."),
		kv(protocol.BucketToolCalls, "call_id", protocol.ToolCallRecord{}, "Each tool call's record under its call id."),
		kv(protocol.BucketSteps, "step_key", protocol.StepResult{}, "Finished steps' results, under session_id.step_id."),
	}
}

// paramKinds are the identifier kinds of the channels' parameters.
var paramKinds = map[string]protocol.ID{
	"session_id": protocol.IDSession, "agent": protocol.IDAgent, "tool": protocol.IDTool,
	"call_id": protocol.IDCall, "step_key": protocol.IDStepKey,
}

// Encoding rules every reader needs, stated once in the document (docs/contract.md explains).
const encodingDoc = "Messages are msgpack maps whose keys are the JSON property names of the schemas, unless a request " +
	"says Content-Type: application/json (the submit and cancel subjects take JSON and answer in it). " +
	"In msgpack, times are timestamp extensions (type -1) where JSON has RFC 3339 strings, and a binary " +
	"value always holds JSON text (tool arguments and results, input schemas): decode it as JSON. " +
	"Every message carries \"v\": 1, the schema version; a reader refuses any other. " +
	"A reply that fails carries error (why) and code (the Code schema: one table of codes for the whole mesh, " +
	"with each code's HTTP status, CLI exit status and whether to retry in its x-skein extension), and goes out with the " +
	"NATS micro headers Nats-Service-Error (why, one line) and Nats-Service-Error-Code (the code's HTTP status). " +
	"A caller decides by the code, never by the error's text."

// AsyncAPI returns the AsyncAPI 3.0 document of the NATS contract, indented, as kept in
// docs/asyncapi.json.
func AsyncAPI() ([]byte, error) {
	chans := Channels()
	var values []any
	for _, c := range chans {
		values = append(values, c.Message)
		if c.Reply != nil {
			values = append(values, c.Reply)
		}
	}
	schemas, err := Schemas(values...)
	if err != nil {
		return nil, err
	}
	channels := map[string]any{}
	operations := map[string]any{}
	messages := map[string]any{}
	msgRef := func(v any, json bool) (string, map[string]any) {
		name := reflect.TypeOf(v).Name()
		ct := []string{protocol.ContentTypeMsgpack}
		if json {
			ct = append(ct, protocol.ContentTypeJSON)
		}
		messages[name] = map[string]any{
			"name": name, "contentType": protocol.ContentTypeMsgpack,
			"payload":         map[string]any{"$ref": SchemaRef + name},
			"x-content-types": ct,
		}
		return name, map[string]any{"$ref": "#/components/messages/" + name}
	}
	for _, c := range chans {
		ch := map[string]any{"address": c.Address, "description": c.Doc}
		if len(c.Params) > 0 {
			ps := map[string]any{}
			for _, p := range c.Params {
				k, ok := paramKinds[p]
				if !ok {
					return nil, fmt.Errorf("asyncapi: channel %s: parameter %s has no identifier kind", c.ID, p)
				}
				// AsyncAPI 3 parameters carry no schema: the kind's bounds go in an extension.
				ps[p] = map[string]any{"description": k.Doc(),
					"x-skein": map[string]any{"maxLength": k.Max, "pattern": k.Pattern()}}
			}
			ch["parameters"] = ps
		}
		ext := map[string]any{"kind": c.Kind}
		if c.Store != "" {
			ext["store"] = c.Store
		}
		ch["x-skein"] = ext
		msgs := map[string]any{}
		name, ref := msgRef(c.Message, c.JSON)
		msgs[name] = ref
		op := map[string]any{
			"channel":  map[string]any{"$ref": "#/channels/" + escape(c.ID)},
			"messages": []any{map[string]any{"$ref": "#/channels/" + escape(c.ID) + "/messages/" + name}},
		}
		switch c.Kind {
		case Service:
			op["action"] = "receive"
			rname, rref := msgRef(c.Reply, c.JSON)
			msgs[rname] = rref
			op["reply"] = map[string]any{
				"channel":  map[string]any{"$ref": "#/channels/" + escape(c.ID)},
				"messages": []any{map[string]any{"$ref": "#/channels/" + escape(c.ID) + "/messages/" + rname}},
			}
		default:
			op["action"] = "send"
		}
		ch["messages"] = msgs
		channels[c.ID] = ch
		operations[c.ID] = op
	}
	doc := map[string]any{
		"asyncapi": "3.0.0",
		"info": map[string]any{
			"title":       "skein mesh",
			"version":     fmt.Sprint(protocol.SchemaVersion),
			"description": "The NATS subjects of a skein mesh in the default namespace \"" + protocol.DefaultNamespace + "\" (another namespace replaces that first token and prefixes stream and bucket names). " + encodingDoc,
		},
		"defaultContentType": protocol.ContentTypeMsgpack,
		"channels":           channels,
		"operations":         operations,
		"components":         map[string]any{"messages": messages, "schemas": schemas},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// escape makes a channel id a JSON pointer token.
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }
