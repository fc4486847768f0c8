package service

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/auth"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// mesh.limits in an agent.yaml reach provisioning: a fresh mesh prepared by the admin (skein up,
// an embedded run) or by the gateway has the streams and buckets the operator's config asks for,
// not the defaults.
func TestMeshLimitsFromConfigReachProvisioning(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	yaml := `agent: {name: limited}
mesh:
  limits:
    tasks: {max_age: 36h, max_msgs: 777}
    work: {max_bytes: 12345678}
    trace: {max_age: 48h}
    session_ttl: 72h
    bucket_max_bytes: 33554432
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []auth.Identity{auth.Admin, auth.Gateway} {
		t.Run(string(id), func(t *testing.T) {
			srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Shutdown)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := bus.Connect(ctx, srv.URL(), t.Name(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Close)
			names := protocol.NewNames(cfg.Mesh.Namespace)
			if err := Prepare(ctx, id, conn, names, cfg, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			stream := func(base string) (maxAge time.Duration, maxBytes, maxMsgs int64) {
				s, err := conn.JS.Stream(ctx, names.Stream(base))
				if err != nil {
					t.Fatal(err)
				}
				c := s.CachedInfo().Config
				return c.MaxAge, c.MaxBytes, c.MaxMsgs
			}
			if age, _, msgs := stream(protocol.StreamTasks); age != 36*time.Hour || msgs != 777 {
				t.Errorf("TASKS max_age %v max_msgs %d, want 36h and 777", age, msgs)
			}
			if _, b, _ := stream(protocol.StreamWork); b != 12345678 {
				t.Errorf("WORK max_bytes %d, want 12345678", b)
			}
			if age, _, _ := stream(protocol.StreamTrace); age != 48*time.Hour {
				t.Errorf("TRACE max_age %v, want 48h", age)
			}
			if age, _, _ := stream(protocol.StreamResults); age != bus.DefaultLimits().Streams[protocol.StreamResults].MaxAge {
				t.Errorf("RESULTS max_age %v, want the default (not set in the config)", age)
			}
			kv, err := bus.KV(ctx, conn.JS, names, protocol.BucketSessions)
			if err != nil {
				t.Fatal(err)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.TTL() != 72*time.Hour {
				t.Errorf("sessions bucket TTL %v, want 72h", st.TTL())
			}
			if bs, ok := st.(*jetstream.KeyValueBucketStatus); !ok || bs.StreamInfo().Config.MaxBytes != 33554432 {
				t.Errorf("sessions bucket status %T, want max_bytes 33554432", st)
			}
		})
	}
}
