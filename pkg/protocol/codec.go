package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"

	"github.com/vmihailenco/msgpack/v5"
)

// SchemaVersion is the version every message is written with. A reader refuses any other
// version instead of guessing at its meaning.
const SchemaVersion = 1

// Header is embedded in every message type; msgpack inlines it.
type Header struct {
	V int `msgpack:"v" json:"v"`
}

func (h *Header) header() *Header { return h }

// Message is any protocol type (anything embedding Header).
type Message interface {
	header() *Header
}

// ErrVersion is returned for a message written with an unknown schema version.
var ErrVersion = errors.New("unsupported schema version")

// Marshal stamps the schema version and encodes m as msgpack.
func Marshal(m Message) ([]byte, error) {
	m.header().V = SchemaVersion
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what(m), err)
	}
	return b, nil
}

// Unmarshal decodes msgpack into m and refuses unknown schema versions.
func Unmarshal(data []byte, m Message) error {
	if err := msgpack.Unmarshal(data, m); err != nil {
		return notMsgpack(m, data, err)
	}
	if v := m.header().V; v != SchemaVersion {
		return fmt.Errorf("%s: %w %d (this build speaks %d)", what(m), ErrVersion, v, SchemaVersion)
	}
	return nil
}

// Decode errors are read by whoever sent the message, often a client in another language: they
// name the message and the field in the words of the contract (docs/contract.md), never Go's.

// what names a message type in words: *SubmitRequest is "submit request".
func what(m any) string {
	t := reflect.TypeOf(m)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var b strings.Builder
	rs := []rune(t.Name())
	for i, r := range rs {
		// A word starts at a capital after a small letter, or at the last capital of a run
		// followed by a small letter (HTTPReply: "http reply").
		if i > 0 && unicode.IsUpper(r) && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// notMsgpack says why data is not m in msgpack; a body that looks like JSON gets the header to
// send with it.
func notMsgpack(m Message, data []byte, err error) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%s: the body is empty", what(m))
	}
	if b := bytes.TrimSpace(data)[0]; b == '{' || b == '[' {
		return fmt.Errorf("%s: the body is not msgpack; it looks like JSON: send it with the header %s: %s", what(m), HeaderContentType, ContentTypeJSON)
	}
	return fmt.Errorf("%s: the body is not valid msgpack (%s)", what(m), strings.TrimPrefix(err.Error(), "msgpack: "))
}

// notJSON says why data is not m in JSON.
func notJSON(m Message, err error) error {
	return fmt.Errorf("%s: %s", what(m), DescribeJSONError(err))
}

// DescribeJSONError says in the contract's words why encoding/json could not read a body: the
// field and the kind of value it takes, or where the text stops being JSON; never Go's names.
func DescribeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty; send one JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Sprintf("got a JSON %s, want %s", typ.Value, kindOf(typ.Type))
		}
		return fmt.Sprintf("field %q: got a JSON %s, want %s", typ.Field, typ.Value, kindOf(typ.Type))
	}
	// encoding/json has no type for an unknown field: its message ("json: unknown field "x"")
	// is already in the contract's words once the package's prefix is gone.
	return strings.TrimPrefix(err.Error(), "json: ")
}

// kindOf is the JSON kind a Go type is read from.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	if t.String() == "time.Time" {
		return "a time as an RFC 3339 string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return kindOf(t.Elem())
	}
	return "an object"
}

// A request on a request/reply subject (the gateway's submit and cancel) says how its body is
// encoded in its Content-Type header; the reply is written the same way and says so in its own
// Content-Type. No header means msgpack, what every skein process sends. JSON is for clients in
// any language; its shapes are the json tags of these types (docs/contract.md).
const (
	HeaderContentType  = "Content-Type"
	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"
)

// HeaderValue is the first value of key in h, whatever the case of the name the sender wrote:
// NATS headers keep names as sent and nats.Header.Get matches them exactly, while HTTP clients
// (and people typing `nats req -H`) write content-type as often as Content-Type. It takes any
// header map (nats.Header, micro.Headers).
func HeaderValue(h map[string][]string, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// ErrContentType is returned for a Content-Type that is neither msgpack nor JSON.
var ErrContentType error = &Error{Code: CodeUnsupportedMedia, Msg: "unsupported content type"}

// ContentType normalizes a Content-Type header value ("" is msgpack; parameters such as
// "; charset=utf-8" are ignored) or returns ErrContentType.
func ContentType(header string) (string, error) {
	ct, _, _ := strings.Cut(header, ";")
	switch ct = strings.ToLower(strings.TrimSpace(ct)); ct {
	case "", ContentTypeMsgpack:
		return ContentTypeMsgpack, nil
	case ContentTypeJSON:
		return ContentTypeJSON, nil
	}
	return "", fmt.Errorf("%w %q: use %s or %s", ErrContentType, header, ContentTypeJSON, ContentTypeMsgpack)
}

// MarshalAs encodes m in contentType (a value ContentType returned).
func MarshalAs(contentType string, m Message) ([]byte, error) {
	if contentType != ContentTypeJSON {
		return Marshal(m)
	}
	m.header().V = SchemaVersion
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what(m), err)
	}
	return b, nil
}

// UnmarshalAs decodes data written in contentType into m. JSON is read strictly: one object,
// no field the type does not have (a misspelt field is an error, not a silently ignored one),
// and "v" must be SchemaVersion as in msgpack.
func UnmarshalAs(contentType string, data []byte, m Message) error {
	if contentType != ContentTypeJSON {
		return Unmarshal(data, m)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return notJSON(m, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: more than one JSON value; send one object", what(m))
	}
	if v := m.header().V; v != SchemaVersion {
		return fmt.Errorf("%s: %w %d (this build speaks %d; send \"v\": %d)", what(m), ErrVersion, v, SchemaVersion, SchemaVersion)
	}
	return nil
}

// Stamp sets m's schema version, for a message written by other means than Marshal (the HTTP
// API's JSON replies).
func Stamp(m Message) { m.header().V = SchemaVersion }
