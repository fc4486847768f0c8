package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchmarkRequest is one bus.Request round trip (memory.health against an echo responder), on a
// server that enforces the matrix and on one without authentication, to show what identities
// and permissions cost per call.
func BenchmarkRequest(b *testing.B) {
	for _, withAuth := range []bool{false, true} {
		name := "anonymous"
		if withAuth {
			name = "matrix"
		}
		b.Run(name, func(b *testing.B) {
			names := protocol.NewNames("")
			o := embedded.Options{StoreDir: b.TempDir(), Listen: "127.0.0.1:0"}
			creds := b.TempDir()
			if withAuth {
				o.CredsDir, o.Names = creds, names
			}
			srv, err := embedded.Start(o)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown()
			ctx := context.Background()
			dial := func(id auth.Identity) *bus.Conn {
				var opts []bus.Option
				if withAuth {
					opts = append(opts, bus.WithCreds(auth.File(creds, id)))
				}
				c, err := bus.Connect(ctx, srv.URL(), string(id), 5*time.Second, opts...)
				if err != nil {
					b.Fatal(err)
				}
				return c
			}
			server, client := dial(auth.Memoryd), dial(auth.Executor)
			defer server.Close()
			defer client.Close()
			if _, err := server.NC.QueueSubscribe(names.Memory(protocol.MemHealth), "q", func(m *nats.Msg) {
				data, _ := protocol.Marshal(&protocol.MemoryHealthReply{OK: true})
				_ = m.Respond(data)
			}); err != nil {
				b.Fatal(err)
			}
			_ = server.NC.Flush()
			b.ResetTimer()
			for range b.N {
				var rep protocol.MemoryHealthReply
				if err := bus.Request(ctx, client.NC, names.Memory(protocol.MemHealth), &protocol.MemoryHealthRequest{}, &rep, 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
