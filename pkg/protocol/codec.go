package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	return b, nil
}

// Unmarshal decodes msgpack into m and refuses unknown schema versions.
func Unmarshal(data []byte, m Message) error {
	if err := msgpack.Unmarshal(data, m); err != nil {
		return fmt.Errorf("decode %T: %w", m, err)
	}
	if v := m.header().V; v != SchemaVersion {
		return fmt.Errorf("decode %T: %w %d (this build speaks %d)", m, ErrVersion, v, SchemaVersion)
	}
	return nil
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
		return nil, fmt.Errorf("encode %T: %w", m, err)
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
		return fmt.Errorf("decode %T from JSON: %w", m, err)
	}
	if dec.More() {
		return fmt.Errorf("decode %T from JSON: more than one value", m)
	}
	if v := m.header().V; v != SchemaVersion {
		return fmt.Errorf("decode %T from JSON: %w %d (this build speaks %d; send \"v\": %d)", m, ErrVersion, v, SchemaVersion, SchemaVersion)
	}
	return nil
}

// Stamp sets m's schema version, for a message written by other means than Marshal (the HTTP
// API's JSON replies).
func Stamp(m Message) { m.header().V = SchemaVersion }
