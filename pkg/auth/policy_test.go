package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestPolicy states the trust boundary in words and checks each sentence on a real server,
// independently of how the matrix spells it: a matrix edit that breaks one of these fails here.
func TestPolicy(t *testing.T) {
	m := startMesh(t)
	m.seed(t)
	n := m.names
	b := n.Bucket
	mem := func(op string) string { return n.Memory(op) }
	cases := []struct {
		what  string
		id    auth.Identity
		allow bool
		op    func(context.Context, *conn) error
	}{
		{"an executor cannot write the sessions bucket", auth.Executor, false, kvPut(b(protocol.BucketSessions))},
		{"an executor cannot write memory", auth.Executor, false, kvPut(b(protocol.BucketMemory))},
		{"a miner cannot write memory directly", auth.Miner, false, kvPut(b(protocol.BucketMemory))},
		{"a gateway cannot write memory", auth.Gateway, false, kvPut(b(protocol.BucketMemory))},
		{"memoryd writes memory", auth.Memoryd, true, kvPut(b(protocol.BucketMemory))},
		{"a toolhost cannot read memory", auth.Toolhost, false, kvGet(b(protocol.BucketMemory))},
		{"a toolhost cannot retrieve guidelines", auth.Toolhost, false, call(mem(protocol.MemRetrieve))},
		{"a toolhost cannot read sessions", auth.Toolhost, false, kvGet(b(protocol.BucketSessions))},
		{"a client cannot import memory", auth.Client, false, call(mem(protocol.MemImport))},
		{"a client cannot evict memory", auth.Client, false, call(mem(protocol.MemEvict))},
		{"memoryd cannot import into itself", auth.Memoryd, false, call(mem(protocol.MemImport))},
		{"admin imports memory", auth.Admin, true, call(mem(protocol.MemImport))},
		{"admin evicts memory", auth.Admin, true, call(mem(protocol.MemEvict))},
		{"a client submits", auth.Client, true, call(n.Submit())},
		{"a client cancels", auth.Client, true, call(n.Cancel())},
		{"a client reads traces", auth.Client, true, readStream(n.Stream(protocol.StreamTrace))},
		{"a client reads sessions", auth.Client, true, kvGet(b(protocol.BucketSessions))},
		{"a client cannot forge a trace event", auth.Client, false, publish(n.Trace("s1"))},
		{"a toolhost cannot forge a step result", auth.Toolhost, false, publish(n.Result("s1"))},
		{"a client cannot queue work for executors", auth.Client, false, publish(n.Work("assistant"))},
		{"an executor cannot impersonate memoryd", auth.Executor, false, serve(mem(protocol.MemRetrieve))},
		{"a client cannot listen to tool calls", auth.Client, false, subscribe(n.Tool(">"))},
		{"a toolhost cannot read other identities' replies", auth.Toolhost, false, subscribe("_INBOX.>")},
		{"a toolhost cannot read the executor's replies", auth.Toolhost, false, subscribe(auth.InboxPrefix(auth.Executor) + ".>")},
		{"a toolhost reads its own replies", auth.Toolhost, true, subscribe(auth.InboxPrefix(auth.Toolhost) + ".>")},
		{"a toolhost answers into an executor's inbox", auth.Toolhost, true, reply(auth.InboxPrefix(auth.Executor) + ".x")},
		{"a toolhost cannot write into a client's inbox", auth.Toolhost, false, reply(auth.InboxPrefix(auth.Client) + ".x")},
		{"a client cannot write into an executor's inbox", auth.Client, false, reply(auth.InboxPrefix(auth.Executor) + ".x")},
		{"an executor cannot write into the planner's inbox", auth.Executor, false, reply(auth.InboxPrefix(auth.Planner) + ".x")},
		{"a client cannot take the miner's trace events", auth.Client, false, pullDurable(n.Stream(protocol.StreamTrace), protocol.ConsumerMiner)},
		{"a planner cannot take the miner's trace events", auth.Planner, false, pullDurable(n.Stream(protocol.StreamTrace), protocol.ConsumerMiner)},
		{"the miner pulls its own consumer", auth.Miner, true, pullDurable(n.Stream(protocol.StreamTrace), protocol.ConsumerMiner)},
		{"a gateway cannot take the planner's tasks", auth.Gateway, false, pullDurable(n.Stream(protocol.StreamTasks), protocol.ConsumerPlanner)},
		{"a planner cannot delete a stream", auth.Planner, false, deleteStream(n.Stream(protocol.StreamTrace))},
		{"a gateway cannot delete a stream", auth.Gateway, false, deleteStream(n.Stream(protocol.StreamTasks))},
		{"a gateway cannot reconfigure the memory bucket", auth.Gateway, false, updateStream("KV_" + b(protocol.BucketMemory))},
		{"a client cannot purge the trace", auth.Client, false, purgeStream(n.Stream(protocol.StreamTrace))},
		{"admin deletes a stream", auth.Admin, true, deleteStream("SCRATCH")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.admin.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "SCRATCH", Subjects: []string{"scratch.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ stream, name string }{{protocol.StreamTrace, protocol.ConsumerMiner}, {protocol.StreamTasks, protocol.ConsumerPlanner}} {
		if _, err := m.admin.JS.CreateOrUpdateConsumer(ctx, n.Stream(d.stream), jetstream.ConsumerConfig{Durable: d.name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) { m.check(t, c.id, c.what, c.allow, c.op) })
	}
}

func pullDurable(stream, name string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		cons, err := c.JS.Consumer(ctx, stream, name)
		if err != nil {
			return err
		}
		msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(3*time.Second))
		if err != nil {
			return err
		}
		for m := range msgs.Messages() {
			_ = m.Ack()
		}
		return msgs.Error()
	}
}

func deleteStream(name string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error { return c.JS.DeleteStream(ctx, name) }
}

func purgeStream(name string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		s, err := c.JS.Stream(ctx, name)
		if err != nil {
			return err
		}
		return s.Purge(ctx)
	}
}

func updateStream(name string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		s, err := c.JS.Stream(ctx, name)
		if err != nil {
			return err
		}
		cfg := s.CachedInfo().Config
		cfg.MaxAge = time.Second
		_, err = c.JS.UpdateStream(ctx, cfg)
		return err
	}
}

// TestAnonymousIsRefused: a connection without credentials fails at once, with one line that
// names the fix.
func TestAnonymousIsRefused(t *testing.T) {
	m := startMesh(t)
	if nc, err := nats.Connect(m.url); err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	_, err := bus.Connect(ctx, m.url, "anon", 15*time.Second)
	if err == nil {
		t.Fatal("bus.Connect without credentials succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "--creds") || !strings.Contains(msg, "SKEIN_CREDS") || strings.Contains(msg, "\n") {
		t.Errorf("refusal should be one line naming --creds and SKEIN_CREDS: %q", msg)
	}
	if time.Since(began) > 10*time.Second {
		t.Errorf("a refused identity was retried until the connect deadline")
	}
	// Credentials of another mesh are refused too, and the message says so.
	other := t.TempDir()
	if _, err := auth.Ensure(other); err != nil {
		t.Fatal(err)
	}
	_, err = bus.Connect(ctx, m.url, "stranger", 5*time.Second, bus.WithCreds(auth.File(other, auth.Client)))
	if err == nil || !strings.Contains(err.Error(), "does not know this identity") {
		t.Errorf("foreign credentials: %v", err)
	}
}

// TestGatewayCreatesOthersWait: on a fresh mesh the gateway creates what is missing (and only
// that), a planner may not create anything, and waits until the gateway has.
func TestGatewayCreatesOthersWait(t *testing.T) {
	creds := t.TempDir()
	names := protocol.NewNames("")
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", CredsDir: creds, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	m := &testMesh{url: srv.URL(), creds: creds, names: names}
	planner := m.dial(t, auth.Planner)
	if d, _ := planner.try(func(ctx context.Context, c *conn) error {
		return bus.CreateMissing(ctx, c.JS, names, bus.DefaultLimits())
	}); d == nil {
		t.Error("a planner created the mesh's streams; only the gateway and admin may")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		waited <- bus.WaitStreams(ctx, planner.JS, auth.Resources(auth.Planner, names), 20*time.Second, nil)
	}()
	gw := m.dial(t, auth.Gateway)
	if err := bus.CreateMissing(ctx, gw.JS, names, bus.DefaultLimits()); err != nil {
		t.Fatalf("gateway provisioning: %v", err)
	}
	if err := bus.CreateMissing(ctx, gw.JS, names, bus.DefaultLimits()); err != nil {
		t.Fatalf("gateway provisioning twice: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("planner waiting for the streams: %v", err)
	}
	admin := m.dial(t, auth.Admin)
	// Every stream and bucket of the matrix is one provisioning creates: a role waits at start
	// for each one it uses, and would wait in vain for one nobody creates.
	for _, r := range auth.Matrix {
		if r.Kind == auth.KindSubject {
			continue
		}
		if _, err := admin.JS.Stream(ctx, r.StreamName(names)); err != nil {
			t.Errorf("matrix row %s: stream %s not created by provisioning (add it to bus.Provision): %v", r.Base, r.StreamName(names), err)
		}
	}
	// An operator's edit survives the gateway's provisioning.
	s, err := admin.JS.Stream(ctx, names.Stream(protocol.StreamTrace))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxAge = 48 * time.Hour
	if _, err := admin.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := bus.CreateMissing(ctx, gw.JS, names, bus.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if s, err = admin.JS.Stream(ctx, names.Stream(protocol.StreamTrace)); err != nil || s.CachedInfo().Config.MaxAge != 48*time.Hour {
		t.Errorf("the gateway changed an existing stream: %v %v", err, s.CachedInfo().Config.MaxAge)
	}
}

// TestRefusedRequestEndsAtOnce: a request the server refuses gets no answer; bus.Request must
// say so instead of waiting and retrying as if the responder were slow.
func TestRefusedRequestEndsAtOnce(t *testing.T) {
	m := startMesh(t)
	m.seed(t)
	c := m.dial(t, auth.Client)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rep protocol.MemoryImportReply
	err := bus.Request(ctx, c.NC, m.names.Memory(protocol.MemImport), &protocol.MemoryImportRequest{}, &rep, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), "may not send") {
		t.Fatalf("refused request: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the refused request waited for its deadline")
	}
	// The same connection still makes the requests it may.
	hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
	defer hcancel()
	if _, err := c.NC.RequestWithContext(hctx, m.names.Memory(protocol.MemHealth), []byte("x")); err != nil {
		t.Fatalf("allowed request after a refusal: %v", err)
	}
}

// TestCredsAgainstAnOpenServer: credentials found in SKEIN_HOME do not lock a process out of a
// server that has no authentication (a bare nats-server -js); it connects, and logs that the
// mesh is open.
func TestCredsAgainstAnOpenServer(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	dir := t.TempDir()
	if _, err := auth.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "open", 5*time.Second, bus.WithCreds(auth.File(dir, auth.Executor)))
	if err != nil {
		t.Fatalf("connect with credentials to a server without authentication: %v", err)
	}
	defer c.Close()
	if err := bus.Provision(ctx, c.JS, protocol.NewNames(""), bus.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
}
