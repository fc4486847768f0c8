package bustest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A role's loop runs until its test ends, and the test's cleanup waits for it to return, with
// its connection still open; a role that says it is ready lets GoReady return.
func TestRolesRunUntilTheTestEnds(t *testing.T) {
	stopped := make(chan struct{})
	m := bustest.Start(t)
	t.Run("roles", func(t *testing.T) {
		roles := bustest.RunRoles(t, m)
		ready := make(chan struct{})
		conn := roles.Connect("waiter")
		roles.GoReady("waiter", ready, func(ctx context.Context) error {
			close(ready)
			<-ctx.Done()
			// The connection outlives the loop: a role may still use it as it stops.
			if conn.NC.IsDraining() || conn.NC.IsClosed() {
				return errors.New("the role's connection closed before the role was told to stop")
			}
			close(stopped)
			return ctx.Err()
		})
		select {
		case <-stopped:
			t.Fatal("the role stopped before its test ended")
		default:
		}
	})
	select {
	case <-stopped:
	default:
		t.Fatal("the test ended before its role's loop returned")
	}
}

// An agent RegisterAgent puts in the agents bucket is one WaitAgent finds.
func TestRegisterAgentIsWhatWaitAgentFinds(t *testing.T) {
	m := bustest.Start(t)
	bustest.RegisterAgent(t, m.Conn, m.Names, protocol.AgentSpec{Name: "greeter", MaxSteps: 5})
	bustest.WaitAgent(t, m.Conn, m.Names, "greeter")
}
