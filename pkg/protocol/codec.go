package protocol

import (
	"errors"
	"fmt"

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
