package service

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A role whose connection the server closes for good is stopped and its process exits non-zero
// (ExitUnavailable), so a supervisor restarts it; it does not stay up without a connection.
func TestARoleWhoseConnectionIsLostExits(t *testing.T) {
	m := bustest.Start(t)
	conn := m.Connect(t, "role")
	stopped := make(chan struct{})
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), conn, slog.New(slog.DiscardHandler), func(ctx context.Context) error {
			<-ctx.Done() // serves until told to stop
			close(stopped)
			return ctx.Err()
		})
	}()
	if err := conn.NC.Publish("x."+strings.Repeat("a", 5000), nil); err != nil {
		t.Fatal(err)
	}
	if c := poll.Receive(t, 15*time.Second, "the role to exit after its connection was closed for good", code); c != protocol.ExitUnavailable {
		t.Fatalf("exit status %d, want %d", c, protocol.ExitUnavailable)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the role's context was not cancelled before the process exits")
	}
}
