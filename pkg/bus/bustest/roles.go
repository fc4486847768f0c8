package bustest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Roles runs a test's roles in process (a planner, executors, a gateway, memoryd, ...) on a
// Mesh, each loop in a goroutine of its own, until the test ends.
type Roles struct {
	// Ctx ends when the test does: a role made with it (executor.New, toolhost.New) lives as
	// long as its loop.
	Ctx   context.Context
	t     testing.TB
	mesh  *Mesh
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []*bus.Conn
}

// RunRoles returns a Roles on m whose cleanup cancels Ctx, waits for every loop to return and
// then closes the connections made with Connect.
func RunRoles(t testing.TB, m *Mesh) *Roles {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Roles{Ctx: ctx, t: t, mesh: m}
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	return r
}

// Connect opens a role's connection to the mesh. Unlike Mesh.Connect, whose cleanup may run
// while the roles still serve (cleanups run last first), it stays open until every loop has
// returned: a role must not see its connection drain before it is told to stop.
func (r *Roles) Connect(name string) *bus.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, r.mesh.URL, name, 5*time.Second)
	if err != nil {
		r.t.Errorf("connect %s: %v", name, err) // may run in a role's goroutine: no Fatal
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns = append(r.conns, c)
	return c
}

// Go runs one role's loop (ex.Serve, a closure around planner.Run); a loop that ends with an
// error other than the end of the test fails the test.
func (r *Roles) Go(name string, run func(ctx context.Context) error) {
	r.start(name, run)
}

// GoReady is Go for a role that closes ready once it serves (its Deps.Ready): it returns then,
// and fails the test at once when the loop ends first or is not ready within ReadyTimeout.
func (r *Roles) GoReady(name string, ready <-chan struct{}, run func(ctx context.Context) error) {
	r.t.Helper()
	done := r.start(name, run)
	select {
	case <-ready:
	case <-done:
		r.t.Fatalf("%s stopped before it was ready", name)
	case <-time.After(ReadyTimeout):
		r.t.Fatalf("%s not ready within %s", name, ReadyTimeout)
	}
}

func (r *Roles) start(name string, run func(ctx context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		if err := run(r.Ctx); err != nil && !errors.Is(err, context.Canceled) {
			r.t.Errorf("%s stopped: %v", name, err)
		}
	}()
	return done
}

// RegisterAgent puts spec in the agents bucket as an executor registers its agent, so that a
// test of the gateway or the CLI can submit to it with no executor running.
func RegisterAgent(t testing.TB, c *bus.Conn, names protocol.Names, spec protocol.AgentSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec.Updated = time.Now().UTC()
	data, err := protocol.Marshal(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := KV(t, c, names, protocol.BucketAgents).Put(ctx, spec.Name, data); err != nil {
		t.Fatal(err)
	}
}
