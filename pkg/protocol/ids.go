package protocol

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// ID is one kind of identifier. Every name that reaches a subject, a KV key, an object name or
// a header (session ids, agent and tool names, step and call ids, memory entry ids, the
// namespace) is of one of the kinds below, with one alphabet and one longest length, checked
// at every door (the gateway's submit and cancel subjects and HTTP API, every memoryd and
// toolhost request, the steps and tasks the roles consume, the CLI's arguments) and published
// in docs/asyncapi.json and docs/openapi.json as pattern and maxLength.
//
// Why these lengths. A NATS server closes a connection that sends a protocol line longer than
// its max_control_line (4096 bytes by default; a client cannot learn the server's value), and
// nats.go then gives up on that connection for good. The line is the operation's arguments:
// subject, reply inbox and two byte counts. The longest subjects any role builds from these ids
// are JetStream API requests about a key, with a namespace of MaxNamespace (32) bytes:
//
//	watch one call record:   $JS.API.CONSUMER.CREATE.KV_<ns>_toolcalls.<consumer>.$KV.<ns>_toolcalls.<call id>
//	                         24 + 45 + 1 + 80 (consumer name) + 1 + 47 + 256              = 454
//	read one call record:    $JS.API.DIRECT.GET.KV_<ns>_toolcalls.$KV.<ns>_toolcalls.<call id>
//	                         19 + 45 + 1 + 47 + 256                                       = 368
//	read a transcript:       $JS.API.DIRECT.GET.OBJ_<ns>_payloads.$O.<ns>_payloads.M.<base64("transcript/"+session)>
//	                         19 + 45 + 1 + 3 + 41 + 3 + 188                               = 300
//	follow a session:        $JS.API.CONSUMER.CREATE.<NS>_TRACE.<consumer>.<ns>.trace.<session>
//	                         24 + 38 + 1 + 80 + 1 + 167                                   = 311
//
// so no subject exceeds MaxSubject (512), and the longest line is 512 + 1 + 128 (a reply
// inbox: _INBOX.<identity>.<22>.<22>) + 1 + 10 + 1 + 10 (header and total byte counts) = 663
// bytes: under a sixth of the server's 4096. Headers travel inside the payload, whose limit
// (max_payload, 1 MiB on a stock server) nats.go checks itself; the longest header built from
// ids is a Msg-Id of a session, a step and a suffix (under 200 bytes). TestLongestSubject
// builds every subject shape with ids of the longest length and holds it to MaxSubject.
type ID struct {
	// Kind is the name of the kind in struct tags (`id:"session"`).
	Kind string
	// Name is what errors and documents call it ("session id").
	Name string
	// Max is the longest length in bytes (the alphabet is ASCII, so also in characters).
	Max int
	// Dotted kinds are tokens joined by single dots (a call id, a step key); the others are one
	// subject token.
	Dotted bool
}

// The limits of the identifier kinds, and MaxSubject, the longest subject they can make.
const (
	MaxNamespace = 32
	MaxAgentName = 64 // an agent is served as a tool too: no longer than a tool name
	MaxToolName  = 64 // what model providers accept as a function name
	MaxSessionID = 128
	MaxStepID    = 32
	MaxCallID    = 256 // <session>.<step>.t<turn>.c<index>: 128 + 1 + 32 + 2 + 10 + 2 + 10 = 185, with room
	MaxMemoryID  = 128 // what the Milvus store's primary key holds
	MaxTurnID    = 64  // a client's id of a conversation message; it names no subject or key
	MaxSubject   = 512
	// MaxControlLine is the NATS server's default max_control_line, the limit the arithmetic
	// above keeps under (pkg/bus refuses a line over it before it is sent).
	MaxControlLine = 4096
	// MaxQueryBytes bounds a search text given as a query parameter or a memory inspect query.
	MaxQueryBytes = 1024
)

// The identifier kinds.
var (
	IDNamespace = ID{Kind: "namespace", Name: "namespace", Max: MaxNamespace}
	IDAgent     = ID{Kind: "agent", Name: "agent name", Max: MaxAgentName}
	IDTool      = ID{Kind: "tool", Name: "tool name", Max: MaxToolName}
	IDSession   = ID{Kind: "session", Name: "session id", Max: MaxSessionID}
	IDStep      = ID{Kind: "step", Name: "step id", Max: MaxStepID}
	IDCall      = ID{Kind: "call", Name: "call id", Max: MaxCallID, Dotted: true}
	IDMemory    = ID{Kind: "memory", Name: "memory entry id", Max: MaxMemoryID}
	IDTurn      = ID{Kind: "turn", Name: "turn id", Max: MaxTurnID}
	// IDStepKey is a finished step's key in the steps bucket: <session>.<step>.
	IDStepKey = ID{Kind: "step_key", Name: "step key", Max: MaxSessionID + 1 + MaxStepID, Dotted: true}
)

// IDs lists every kind, for documents and tests.
var IDs = []ID{IDNamespace, IDAgent, IDTool, IDSession, IDStep, IDCall, IDMemory, IDTurn, IDStepKey}

// IDOfKind returns the kind named in a struct tag.
func IDOfKind(kind string) (ID, bool) {
	for _, k := range IDs {
		if k.Kind == kind {
			return k, true
		}
	}
	return ID{}, false
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Valid reports whether s is a well-formed, non-empty identifier of kind k.
func (k ID) Valid(s string) bool { return k.Check(s) == nil }

// Check says what is wrong with s as an identifier of kind k: empty or malformed
// (CodeBadRequest), or too long (CodeTooLarge). The message never repeats a long s.
func (k ID) Check(s string) error {
	switch {
	case s == "":
		return Errorf(CodeBadRequest, "%s is empty", k.Name)
	case len(s) > k.Max:
		return Errorf(CodeTooLarge, "%s is %d bytes long; at most %d", k.Name, len(s), k.Max)
	}
	prevDot := true // a dotted id may not start with a dot
	for i := 0; i < len(s); i++ {
		c := s[i]
		if k.Dotted && c == '.' && !prevDot && i < len(s)-1 {
			prevDot = true
			continue
		}
		if !tokenByte(c) {
			return Errorf(CodeBadRequest, "%s %s may hold only %s", k.Name, quoteShort(s), k.alphabet())
		}
		prevDot = false
	}
	return nil
}

func (k ID) alphabet() string {
	if k.Dotted {
		return "letters, digits, '-' and '_', in tokens joined by single dots"
	}
	return "letters, digits, '-' and '_'"
}

// Pattern is the ECMA regular expression of the alphabet, for JSON Schema documents (the length
// goes in maxLength).
func (k ID) Pattern() string {
	if k.Dotted {
		return `^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	}
	return `^[A-Za-z0-9_-]+$`
}

// Doc says in one line what an identifier of kind k may be, for documents.
func (k ID) Doc() string {
	return fmt.Sprintf("%s: %s, at most %d characters", k.Name, k.alphabet(), k.Max)
}

// quoteShort quotes s for an error message, cut to a few dozen bytes.
func quoteShort(s string) string {
	const keep = 40
	if len(s) <= keep {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", s[:keep])
}

// UnmarshalChecked is Unmarshal for a message that came through a door (a request, a task, a
// step): it also checks the message's ids (CheckIDs), each of which may become part of a
// subject or a key. Its errors are coded: bad_request for a message it cannot read, the id's
// code for a bad id.
func UnmarshalChecked(data []byte, m Message) error {
	if err := Unmarshal(data, m); err != nil {
		return Wrap(CodeBadRequest, err)
	}
	return CheckIDs(m)
}

// CheckIDs checks every identifier field of a message (fields tagged `id:"<kind>"`, strings or
// lists of strings, in nested structs and lists too) against its kind. Empty fields pass:
// whether a field is required is the handler's business. The error names the field.
func CheckIDs(m any) error {
	v := reflect.ValueOf(m)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return checkValue(v, "")
}

// idField is one tagged field of a struct type, or a struct-typed field that may hold some.
type idField struct {
	index []int
	name  string // JSON name, for the error
	kind  ID     // zero Kind: a nested struct (or list of them) to walk
}

var idFields sync.Map // reflect.Type → []idField

func fieldsOf(t reflect.Type) []idField {
	if f, ok := idFields.Load(t); ok {
		return f.([]idField)
	}
	var out []idField
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if tag := f.Tag.Get("id"); tag != "" {
			k, ok := IDOfKind(tag)
			if !ok {
				panic(fmt.Sprintf("protocol: field %s.%s has unknown id kind %q", t, f.Name, tag))
			}
			out = append(out, idField{index: f.Index, name: name, kind: k})
			continue
		}
		if holdsStruct(f.Type) {
			out = append(out, idField{index: f.Index, name: name})
		}
	}
	idFields.Store(t, out)
	return out
}

func holdsStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeOf(ID{}).PkgPath()
}

func checkValue(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return checkValue(v.Elem(), path)
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if err := checkValue(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Struct:
	default:
		return nil
	}
	for _, f := range fieldsOf(v.Type()) {
		fv := v.FieldByIndex(f.index)
		at := f.name
		if path != "" {
			at = path + "." + f.name
		}
		if f.kind.Kind == "" {
			if err := checkValue(fv, at); err != nil {
				return err
			}
			continue
		}
		switch fv.Kind() {
		case reflect.String:
			if s := fv.String(); s != "" {
				if err := f.kind.Check(s); err != nil {
					return fmt.Errorf("%s: %w", at, err)
				}
			}
		case reflect.Slice:
			for i := 0; i < fv.Len(); i++ {
				if s := fv.Index(i).String(); s != "" {
					if err := f.kind.Check(s); err != nil {
						return fmt.Errorf("%s[%d]: %w", at, i, err)
					}
				}
			}
		}
	}
	return nil
}
