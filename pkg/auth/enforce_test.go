package auth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// testMesh is a real embedded nats-server configured from the matrix, provisioned by admin.
type testMesh struct {
	url   string
	creds string
	names protocol.Names
	admin *bus.Conn
}

func startMesh(t *testing.T) *testMesh {
	t.Helper()
	m := &testMesh{creds: t.TempDir(), names: protocol.NewNames("")}
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0", CredsDir: m.creds, Names: m.names})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	m.url = srv.URL()
	m.admin = m.dial(t, auth.Admin).Conn
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, m.admin.JS, m.names, bus.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	return m
}

// conn is one identity's connection and the permission violations the server reported on it.
type conn struct {
	*bus.Conn
	id     auth.Identity
	denied chan error
}

func (m *testMesh) dial(t *testing.T, id auth.Identity) *conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, m.url, "test-"+string(id), 5*time.Second, bus.WithCreds(auth.File(m.creds, id)))
	if err != nil {
		t.Fatalf("connect as %s: %v", id, err)
	}
	t.Cleanup(c.Close)
	out := &conn{Conn: c, id: id, denied: make(chan error, 64)}
	prev := c.NC.ErrorHandler()
	c.NC.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		prev(nc, sub, err)
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case out.denied <- err:
			default:
			}
		}
	})
	return out
}

// try runs op and reports whether the server refused it. A refused request never gets an
// answer, so the violation the server reports ends the wait.
func (c *conn) try(op func(ctx context.Context, c *conn) error) (denied error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx, c) }()
	select {
	case err = <-done:
		// A refused subscription or plain publish is reported after the fact; the reader records
		// it before it handles the flush's answer, the callback may come later.
		_ = c.NC.Flush()
		if last := c.NC.LastError(); errors.Is(last, nats.ErrPermissionViolation) {
			return last, err
		}
		select {
		case d := <-c.denied:
			return d, err
		default:
			return nil, err
		}
	case d := <-c.denied:
		cancel()
		<-done
		return d, nil
	}
}

func (m *testMesh) check(t *testing.T, id auth.Identity, what string, allow bool, op func(ctx context.Context, c *conn) error) {
	t.Helper()
	c := m.dial(t, id)
	denied, err := c.try(op)
	switch {
	case allow && denied != nil:
		t.Errorf("%s: %s should be allowed; server refused: %v", id, what, denied)
	case allow && err != nil:
		t.Errorf("%s: %s should be allowed: %v", id, what, err)
	case !allow && denied == nil:
		t.Errorf("%s: %s should be refused by the server; got no permissions violation (err %v)", id, what, err)
	}
}

func concrete(s string) string {
	return strings.NewReplacer("*", "x", ">", "x").Replace(s)
}

// Operations, one per kind of access.

func call(subject string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		_, err := c.NC.RequestWithContext(ctx, concrete(subject), []byte("ping"))
		return err
	}
}

func serve(subject string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		if _, err := c.NC.QueueSubscribe(subject, "q", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
			return err
		}
		return c.NC.FlushWithContext(ctx)
	}
}

func subscribe(subject string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		if _, err := c.NC.Subscribe(subject, func(*nats.Msg) {}); err != nil {
			return err
		}
		return c.NC.FlushWithContext(ctx)
	}
}

func publish(subject string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		_, err := c.JS.Publish(ctx, concrete(subject), []byte("forged"))
		return err
	}
}

// reply publishes a core NATS message, as a served request's answer is sent.
func reply(subject string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		if err := c.NC.Publish(subject, []byte("answer")); err != nil {
			return err
		}
		return c.NC.FlushWithContext(ctx)
	}
}

func readStream(stream string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		s, err := c.JS.Stream(ctx, stream)
		if err != nil {
			return err
		}
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		_, err = cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		return err
	}
}

func getMsg(stream string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		s, err := c.JS.Stream(ctx, stream)
		if err != nil {
			return err
		}
		_, err = s.GetMsg(ctx, 1)
		return err
	}
}

func kvPut(bucket string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		// A KV put is a JetStream publish to $KV.<bucket>.<key>; going under the KV API shows the
		// server, not the client library, refuses it.
		_, err := c.JS.Publish(ctx, "$KV."+bucket+".forged", []byte("x"))
		return err
	}
}

func kvGet(bucket string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		kv, err := c.JS.KeyValue(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = kv.Get(ctx, "seed")
		return err
	}
}

func objPut(bucket string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		ob, err := c.JS.ObjectStore(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = ob.PutBytes(ctx, "written-by-"+string(c.id), []byte("x"))
		return err
	}
}

func objGet(bucket string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		ob, err := c.JS.ObjectStore(ctx, bucket)
		if err != nil {
			return err
		}
		_, err = ob.GetBytes(ctx, "seed")
		return err
	}
}

// seed puts one message in every stream and one key in every bucket, and answers every
// service subject, so allowed operations have something to find.
func (m *testMesh) seed(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range auth.Matrix {
		switch r.Kind {
		case auth.KindSubject:
			if _, err := m.admin.NC.QueueSubscribe(r.Subject(m.names), "responders", func(msg *nats.Msg) { _ = msg.Respond([]byte("ok")) }); err != nil {
				t.Fatal(err)
			}
		case auth.KindStream:
			if _, err := m.admin.JS.Publish(ctx, concrete(r.Subject(m.names)), []byte("seed")); err != nil {
				t.Fatal(err)
			}
		case auth.KindBucket:
			kv, err := m.admin.JS.KeyValue(ctx, m.names.Bucket(r.Base))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "seed", []byte("x")); err != nil {
				t.Fatal(err)
			}
		case auth.KindObjectStore:
			ob, err := m.admin.JS.ObjectStore(ctx, m.names.Bucket(r.Base))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ob.PutBytes(ctx, "seed", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.admin.NC.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestMatrixIsEnforced checks every row of the matrix for every identity on a real server: what
// the row grants works, and everything else is refused by the server with a permissions
// violation.
func TestMatrixIsEnforced(t *testing.T) {
	m := startMesh(t)
	m.seed(t)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	run := func(name string, f func(t *testing.T)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f(t)
		}()

	}
	for _, r := range auth.Matrix {
		for _, id := range auth.Identities {
			a := r.Grants[id]
			admin := id == auth.Admin
			row := fmt.Sprintf("%s (%s)", r.Base, r.Doc)
			switch r.Kind {
			case auth.KindSubject:
				s := r.Subject(m.names)
				// Advisories and broadcasts (cancel notices) are subscribed to, not served.
				broadcast := false
				for _, g := range r.Grants {
					broadcast = broadcast || g&auth.Subscribe != 0
				}
				if strings.HasPrefix(s, "$JS.EVENT") || broadcast {
					run(row, func(t *testing.T) { m.check(t, id, "subscribe "+s, admin || a&auth.Subscribe != 0, subscribe(s)) })
					if !strings.HasPrefix(s, "$JS.EVENT") {
						run(row, func(t *testing.T) { m.check(t, id, "publish "+s, admin || a&(auth.Call|auth.Publish) != 0, call(s)) })
					}
					continue
				}
				run(row, func(t *testing.T) { m.check(t, id, "call "+s, admin || a&auth.Call != 0, call(s)) })
				run(row, func(t *testing.T) { m.check(t, id, "serve "+s, admin || a&auth.Serve != 0, serve(s)) })
			case auth.KindStream:
				st := r.StreamName(m.names)
				run(row, func(t *testing.T) {
					m.check(t, id, "publish into "+st, admin || a&auth.Publish != 0, publish(r.Subject(m.names)))
				})
				if r.Base != protocol.StreamTasks && r.Base != protocol.StreamWork { // work queues take no readers
					run(row, func(t *testing.T) { m.check(t, id, "read "+st, admin || a&auth.Read != 0, readStream(st)) })
				}
				run(row, func(t *testing.T) {
					m.check(t, id, "get a message of "+st, admin || a&(auth.Get|auth.Read) != 0, getMsg(st))
				})
			case auth.KindBucket:
				b := m.names.Bucket(r.Base)
				run(row, func(t *testing.T) { m.check(t, id, "write bucket "+b, admin || a&auth.Write != 0, kvPut(b)) })
				run(row, func(t *testing.T) { m.check(t, id, "read bucket "+b, admin || a&auth.Read != 0, kvGet(b)) })
			case auth.KindObjectStore:
				b := m.names.Bucket(r.Base)
				run(row, func(t *testing.T) { m.check(t, id, "write object store "+b, admin || a&auth.Write != 0, objPut(b)) })
				run(row, func(t *testing.T) { m.check(t, id, "read object store "+b, admin || a&auth.Read != 0, objGet(b)) })
			}
		}
	}
	wg.Wait()
}

// TestRepliesOutliveTheResponseGrant checks on a real server that every server of the matrix
// answers each of its callers, the admin included, without its one-reply grant
// (allow_responses), which lasts only auth.ResponseTTL: a second answer to the same request, which
// the spent grant does not carry, reaches the caller too. So does an answer sent after the grant
// expired (a long tool, an agent called as a tool, a memory migration).
func TestRepliesOutliveTheResponseGrant(t *testing.T) {
	m := startMesh(t)
	conns := map[auth.Identity]*conn{}
	dial := func(id auth.Identity) *conn {
		if conns[id] == nil {
			conns[id] = m.dial(t, id)
		}
		return conns[id]
	}
	for _, r := range auth.Matrix {
		if r.Kind != auth.KindSubject {
			continue
		}
		for server, a := range r.Grants {
			if a&auth.Serve == 0 {
				continue
			}
			subject := concrete(r.Subject(m.names))
			srv := dial(server)
			sub, err := srv.NC.Subscribe(subject, func(msg *nats.Msg) {
				_ = msg.Respond([]byte("first"))
				_ = msg.Respond([]byte("second"))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.NC.Flush(); err != nil { // the server knows of the subscription
				t.Fatal(err)
			}
			callers := []auth.Identity{auth.Admin}
			for c, ca := range r.Grants {
				if ca&auth.Call != 0 {
					callers = append(callers, c)
				}
			}
			for _, caller := range callers {
				c := dial(caller)
				inbox := c.NC.NewInbox()
				answers, err := c.NC.SubscribeSync(inbox)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.NC.PublishRequest(subject, inbox, []byte("ping")); err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{"first", "second"} {
					if msg, err := answers.NextMsg(10 * time.Second); err != nil {
						t.Errorf("%s serving %s: %s's %s answer: %v", server, subject, caller, want, err)
					} else if string(msg.Data) != want {
						t.Errorf("%s serving %s: %s got %q, want %q", server, subject, caller, msg.Data, want)
					}
				}
				_ = answers.Unsubscribe()
			}
			_ = sub.Unsubscribe()
			if err := srv.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			if last := srv.NC.LastError(); errors.Is(last, nats.ErrPermissionViolation) {
				t.Errorf("%s serving %s: %v", server, subject, last)
			}
		}
	}
}
