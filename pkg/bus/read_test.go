package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
)

// TestReadStreamReadsEverythingAndLeavesNothing covers both ways of reading: direct gets (a
// stream that allows them) and the ephemeral-consumer fallback, over more than one batch.
func TestReadStreamReadsEverythingAndLeavesNothing(t *testing.T) {
	srv, err := embedded.Start(embedded.Options{StoreDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "read-test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			name := fmt.Sprintf("R%v", direct)
			s, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowDirect: direct})
			if err != nil {
				t.Fatal(err)
			}
			// 600 messages for a, interleaved with b's, so a read crosses batches and skips b.
			for i := 0; i < 600; i++ {
				if _, err := c.JS.Publish(ctx, name+".a", []byte(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
				if i%3 == 0 {
					if _, err := c.JS.Publish(ctx, name+".b", []byte("x")); err != nil {
						t.Fatal(err)
					}
				}
			}
			var got []string
			if err := bus.ReadStream(ctx, c.JS, name, name+".a", bus.ReadFrom{}, func(m *jetstream.RawStreamMsg) bool {
				got = append(got, string(m.Data))
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != 600 || got[0] != "0" || got[599] != "599" {
				t.Fatalf("read %d messages (%v … %v)", len(got), got[:min(3, len(got))], got[max(0, len(got)-3):])
			}
			n := 0
			if err := bus.ReadStream(ctx, c.JS, name, name+".>", bus.ReadFrom{Seq: 700}, func(m *jetstream.RawStreamMsg) bool {
				n++
				return n < 5
			}); err != nil || n != 5 {
				t.Fatalf("early stop read %d: %v", n, err)
			}
			n = 0
			if err := bus.ReadStream(ctx, c.JS, name, name+".a", bus.ReadFrom{Time: time.Now().Add(time.Hour)}, func(*jetstream.RawStreamMsg) bool {
				n++
				return true
			}); err != nil || n != 0 {
				t.Fatalf("read from the future: %d messages, %v", n, err)
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Consumers != 0 {
				t.Fatalf("%d consumers left behind", info.State.Consumers)
			}
		})
	}
}
