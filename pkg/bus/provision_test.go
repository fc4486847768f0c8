package bus_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
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

// The payloads object store holds what traces point at (large tool results, transcripts), so its
// objects live as long as trace events: it is created with the TRACE stream's max_age as its TTL,
// a later change of that max_age is logged and left alone, and `skein mesh apply` (Apply) makes
// the store follow it.
func TestPayloadsLiveAsLongAsTheTrace(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := protocol.NewNames("payloads-ttl") // a namespace of its own: created by this test's limits
	l := bus.DefaultLimits()
	l.Streams[protocol.StreamTrace] = bus.StreamLimit{MaxAge: 48 * time.Hour, MaxBytes: 1 << 30, MaxMsgs: 1000}
	if _, err := bus.ProvisionWith(ctx, m.Conn.JS, names, l, bus.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := payloadsTTL(ctx, t, m, names); got != 48*time.Hour {
		t.Fatalf("payloads created with TTL %v, want the trace's max_age 48h", got)
	}

	// The config shortens the trace's max_age: a start only reports it, for the store too.
	l.Streams[protocol.StreamTrace] = bus.StreamLimit{MaxAge: 12 * time.Hour, MaxBytes: 1 << 30, MaxMsgs: 1000}
	var logs strings.Builder
	diffs, err := bus.ProvisionWith(ctx, m.Conn.JS, names, l, bus.ProvisionOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	want := bus.Diff{Resource: "object store " + names.Bucket(protocol.ObjectPayloads), Field: "ttl", Have: "48h0m0s", Want: "12h0m0s"}
	if !slices.Contains(diffs, want) {
		t.Fatalf("diffs %v lack %v", diffs, want)
	}
	if !strings.Contains(logs.String(), "object store differs from the config") || !strings.Contains(logs.String(), "skein mesh apply") {
		t.Fatalf("the difference was not logged with its fix:\n%s", logs.String())
	}
	if got := payloadsTTL(ctx, t, m, names); got != 48*time.Hour {
		t.Fatalf("a start changed the store's TTL to %v", got)
	}

	if _, err := bus.ProvisionWith(ctx, m.Conn.JS, names, l, bus.ProvisionOptions{Apply: true}); err != nil {
		t.Fatal(err)
	}
	if got := payloadsTTL(ctx, t, m, names); got != 12*time.Hour {
		t.Fatalf("after apply the store's TTL is %v, want the trace's new max_age 12h", got)
	}
	if diffs, err := bus.ProvisionWith(ctx, m.Conn.JS, names, l, bus.ProvisionOptions{}); err != nil || len(diffs) != 0 {
		t.Fatalf("after apply: %v, diffs %v", err, diffs)
	}
}

func payloadsTTL(ctx context.Context, t *testing.T, m *bustest.Mesh, names protocol.Names) time.Duration {
	t.Helper()
	obs, err := m.Conn.JS.ObjectStore(ctx, names.Bucket(protocol.ObjectPayloads))
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.TTL()
}
