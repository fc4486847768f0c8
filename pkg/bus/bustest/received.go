package bustest

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

// Received returns a check (for poll) that nc has received a message since Received was called.
// A test whose connection receives nothing else uses it to see a request's "no responders"
// answer: it can then start the responder the request must retry until it finds.
func Received(t testing.TB, nc *nats.Conn) func() error {
	t.Helper()
	// Answers to earlier requests arrive before the flush's own answer: they are not counted.
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	before := nc.Stats().InMsgs
	return func() error {
		if nc.Stats().InMsgs == before {
			return errors.New("nothing received")
		}
		return nil
	}
}
