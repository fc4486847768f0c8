package auth_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestAnswerAfterTheServingNodeDied: a toolhost takes a call through node A, A dies while the
// tool runs, the toolhost reconnects to node B and answers there. The server's response grant
// lived on A, so the answer passes only because the matrix lets a serving identity reply into its
// callers' inboxes (the chaos run lost such answers before).
func TestAnswerAfterTheServingNodeDied(t *testing.T) {
	creds := t.TempDir()
	pub, err := auth.Ensure(creds)
	if err != nil {
		t.Fatal(err)
	}
	names := protocol.NewNames("")
	users, err := embedded.Users(pub, names)
	if err != nil {
		t.Fatal(err)
	}
	start := func(routes string) *server.Server {
		t.Helper()
		o := &server.Options{Host: "127.0.0.1", Port: -1, Nkeys: users, NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "auth-test", Host: "127.0.0.1", Port: -1}}
		if routes != "" {
			o.Routes = server.RoutesFromStr(routes)
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("node did not start")
		}
		return s
	}
	a := start("")
	t.Cleanup(a.Shutdown)
	b := start("nats://" + a.ClusterAddr().String())
	t.Cleanup(b.Shutdown)
	poll.True(t, 10*time.Second, "the nodes to form a cluster", func() bool { return a.NumRoutes() > 0 && b.NumRoutes() > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reconnected := make(chan struct{}, 1)
	// Given node A only, the client learns B from A's INFO (the cluster's client URLs) and
	// reconnects there; a list of both would be shuffled and might start on B.
	toolhost, err := bus.Connect(ctx, a.ClientURL(), "toolhost", 5*time.Second,
		bus.WithCreds(auth.File(creds, auth.Toolhost)))
	if err != nil {
		t.Fatal(err)
	}
	defer toolhost.NC.Close()
	toolhost.NC.SetReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} })
	denied := make(chan error, 4)
	toolhost.NC.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err })
	executor, err := bus.Connect(ctx, b.ClientURL(), "executor", 5*time.Second, bus.WithCreds(auth.File(creds, auth.Executor)))
	if err != nil {
		t.Fatal(err)
	}
	defer executor.NC.Close()

	held := make(chan *nats.Msg, 1)
	var hold atomic.Bool
	if _, err := toolhost.NC.QueueSubscribe(names.Tool("slow"), "toolhost", func(m *nats.Msg) {
		if hold.Load() {
			held <- m
			return
		}
		_ = m.Respond([]byte("warm"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := toolhost.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	// The subscription's interest reaches B through the route; the first answer says it has.
	for {
		if _, err := executor.NC.Request(names.Tool("slow"), nil, 200*time.Millisecond); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no answer through the cluster before the fault")
		}
	}
	if toolhost.NC.ConnectedUrl() != a.ClientURL() {
		t.Fatalf("the toolhost is on %s, want node A %s", toolhost.NC.ConnectedUrl(), a.ClientURL())
	}

	hold.Store(true)
	answer := make(chan error, 1)
	go func() {
		m, err := executor.NC.Request(names.Tool("slow"), []byte("call"), 20*time.Second)
		if err == nil && string(m.Data) != "done" {
			err = nats.ErrBadSubscription
		}
		answer <- err
	}()
	var m *nats.Msg
	select {
	case m = <-held:
	case <-ctx.Done():
		t.Fatal("the call never reached the toolhost")
	}
	a.Shutdown()
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the toolhost did not reconnect to node B")
	}
	if err := m.Respond([]byte("done")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-answer:
		if err != nil {
			t.Fatalf("the caller got no answer after the toolhost moved to node B: %v", err)
		}
	case err := <-denied:
		t.Fatalf("node B refused the answer: %v", err)
	}
}
