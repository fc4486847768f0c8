// Package bustest starts a real, embedded NATS server with the mesh provisioned, for tests.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Mesh is a test server and a client connection to it.
type Mesh struct {
	Server *embedded.Server
	Conn   *bus.Conn
	Names  protocol.Names
	URL    string
}

// Start runs a JetStream server on a free loopback port with state in a temp dir, provisions the
// default namespace and closes everything when the test ends.
func Start(t testing.TB) *Mesh {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, srv.URL(), t.Name(), 10*time.Second)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(conn.Close)
	names := protocol.NewNames("")
	if err := bus.Provision(ctx, conn.JS, names, bus.DefaultLimits()); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return &Mesh{Server: srv, Conn: conn, Names: names, URL: srv.URL()}
}

// Connect opens another client connection to the test server.
func (m *Mesh) Connect(t testing.TB, name string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, m.URL, name, 5*time.Second)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
