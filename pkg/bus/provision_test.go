package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Provisioning creates what is missing, leaves an operator's edit of an existing stream or
// bucket alone (reporting it), and changes it only when asked to apply.
func TestProvisionNeverRevertsAnOperatorsEditUnlessApplied(t *testing.T) {
	m := bustest.Start(t) // provisions with the defaults
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := bus.DefaultLimits()
	if diffs, err := bus.ProvisionWith(ctx, m.Conn.JS, m.Names, l, bus.ProvisionOptions{}); err != nil || len(diffs) != 0 {
		t.Fatalf("second provisioning with the same limits: %v, diffs %v", err, diffs)
	}

	// The operator shortens TASKS and gives sessions a shorter TTL.
	s, err := m.Conn.JS.Stream(ctx, m.Names.Stream(protocol.StreamTasks))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := m.Conn.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// And the config raises the tool call TTL.
	l.ToolCallTTL = 48 * time.Hour

	diffs, err := bus.ProvisionWith(ctx, m.Conn.JS, m.Names, l, bus.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 2 {
		t.Fatalf("diffs %v, want the TASKS max_age and the toolcalls ttl", diffs)
	}
	if got := maxAge(ctx, t, m, protocol.StreamTasks); got != time.Hour {
		t.Fatalf("provisioning changed the operator's max_age to %v", got)
	}

	if _, err := bus.ProvisionWith(ctx, m.Conn.JS, m.Names, l, bus.ProvisionOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	if got := maxAge(ctx, t, m, protocol.StreamTasks); got != l.Streams[protocol.StreamTasks].MaxAge {
		t.Fatalf("apply left max_age at %v", got)
	}
	if diffs, err := bus.ProvisionWith(ctx, m.Conn.JS, m.Names, l, bus.ProvisionOptions{}); err != nil || len(diffs) != 0 {
		t.Fatalf("after apply: %v, diffs %v", err, diffs)
	}
}

// Every stream and bucket the mesh provisions is bounded.
func TestEveryStreamAndBucketIsBounded(t *testing.T) {
	n := protocol.NewNames("")
	for _, sc := range bus.StreamConfigs(n, bus.DefaultLimits()) {
		if sc.MaxAge <= 0 || sc.MaxBytes <= 0 || sc.MaxMsgs <= 0 {
			t.Errorf("stream %s is unbounded: age %v bytes %d msgs %d", sc.Name, sc.MaxAge, sc.MaxBytes, sc.MaxMsgs)
		}
	}
	for _, kc := range bus.BucketConfigs(n, bus.DefaultLimits()) {
		if kc.MaxBytes <= 0 {
			t.Errorf("bucket %s has no size bound", kc.Bucket)
		}
	}
}

func maxAge(ctx context.Context, t *testing.T, m *bustest.Mesh, base string) time.Duration {
	t.Helper()
	s, err := m.Conn.JS.Stream(ctx, m.Names.Stream(base))
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config.MaxAge
}
