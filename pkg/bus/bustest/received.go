package bustest

import (
	"errors"

	"github.com/nats-io/nats.go"
)

// Received returns a check (for poll) that nc has received a message since Received was called.
// A test whose connection receives nothing else uses it to see a request's "no responders"
// answer: it can then start the responder the request must retry until it finds.
func Received(nc *nats.Conn) func() error {
	before := nc.Stats().InMsgs
	return func() error {
		if nc.Stats().InMsgs == before {
			return errors.New("nothing received")
		}
		return nil
	}
}
