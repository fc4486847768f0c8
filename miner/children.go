package miner

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
	"github.com/skein-mesh/skein/pkg/trace"
)

// maxChildTraces bounds the child traces one session's mining reads.
const maxChildTraces = 8

// ChildReason is what a child session itself said went wrong: its model's finish reason, else
// the reason its session ended with ("" when its trace says nothing).
func ChildReason(events []protocol.Event) string {
	var finish, terminal string
	for _, ev := range events {
		switch {
		case ev.Type == protocol.EvDecision && ev.Text == protocol.ToolFinish && ev.Reason != "":
			finish = ev.Reason
		case ev.Type.Terminal() && ev.Reason != "":
			terminal = ev.Reason
		}
	}
	return strings.TrimSpace(cmp.Or(finish, terminal))
}

// readChildren mines the traces of the sub-agent sessions a session's failed agent-tool calls
// started, for the lesson about how to call that agent: each such call's error becomes the
// child's own reason (what the toolhost's wrapper would cut off in a short guideline). A child
// whose trace cannot be read keeps the call's error as it is.
func readChildren(ctx context.Context, js jetstream.JetStream, names protocol.Names, s *Session) {
	read := 0
	for i := range s.Calls {
		c := &s.Calls[i]
		if !c.Failed() || len(c.Result.Result) == 0 || read >= maxChildTraces {
			continue
		}
		var child struct {
			SessionID string `json:"session_id"`
		}
		if json.Unmarshal(c.Result.Result, &child) != nil || !protocol.IDSession.Valid(child.SessionID) {
			continue
		}
		read++
		events, err := trace.Read(ctx, js, names, child.SessionID)
		if err != nil {
			continue
		}
		for _, ev := range events {
			if ev.Type == protocol.EvSessionStarted && ev.Agent != c.Tool {
				events = nil // not the session of the agent this call named
				break
			}
		}
		// What is mined becomes prompt text: redact it as the trace's own text is.
		if reason := redact.String(ChildReason(events)); reason != "" {
			c.Result.Error = reason
		}
	}
}
