package llm

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// transcriptVersion is the schema version of a stored transcript.
const transcriptVersion = 1

// Transcript is a conversation as a model saw it: the system blocks and every message. A
// conversation's next turn continues it, so the provider's cache can read the whole prefix.
type Transcript struct {
	V        int           `msgpack:"v"`
	System   []SystemBlock `msgpack:"system"`
	Messages []Message     `msgpack:"messages"`
}

// EncodeTranscript stores a transcript as msgpack (tool arguments may be malformed JSON, which
// encoding/json could not carry).
func EncodeTranscript(system []SystemBlock, msgs []Message) ([]byte, error) {
	b, err := msgpack.Marshal(&Transcript{V: transcriptVersion, System: system, Messages: msgs})
	if err != nil {
		return nil, fmt.Errorf("encode transcript: %w", err)
	}
	return b, nil
}

// DecodeTranscript reads a stored transcript and refuses other schema versions.
func DecodeTranscript(data []byte) (Transcript, error) {
	var t Transcript
	if err := msgpack.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("decode transcript: %w", err)
	}
	if t.V != transcriptVersion {
		return t, fmt.Errorf("decode transcript: schema version %d (this build reads %d)", t.V, transcriptVersion)
	}
	return t, nil
}
