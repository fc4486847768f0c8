package bustest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// DeadLetters waits until the DLQ holds at least n dead letters and returns all it holds, oldest
// first: work that failed for good lands there with its reason in bus.HeaderDLQReason.
func DeadLetters(t testing.TB, c *bus.Conn, names protocol.Names, n int) []jetstream.RawStreamMsg {
	t.Helper()
	var out []jetstream.RawStreamMsg
	poll.Eventually(t, ReadyTimeout, fmt.Sprintf("%d dead letters", n), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := c.JS.Stream(ctx, names.Stream(protocol.StreamDLQ))
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs < uint64(n) {
			return fmt.Errorf("the DLQ holds %d", info.State.Msgs)
		}
		out = out[:0]
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			msg, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // removed (aged out or deleted) between Info and GetMsg
			}
			if err != nil {
				return fmt.Errorf("dead letter %d: %w", seq, err)
			}
			out = append(out, *msg)
		}
		if len(out) < n {
			return fmt.Errorf("the DLQ holds %d", len(out))
		}
		return nil
	})
	return out
}
