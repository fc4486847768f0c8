package bus_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The embedded server does not refuse a mesh because its streams' and buckets' max_bytes add up
// to more than the disk has free: JetStream reserves them up front, and its own default limit
// is 75% of the free space. This provisions meshes until their reservations exceed the disk.
func TestEmbeddedServerTakesMeshesBeyondTheFreeDisk(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	l := bus.DefaultLimits()
	var perMesh int64
	names := protocol.NewNames("")
	for _, c := range bus.StreamConfigs(names, l) {
		perMesh += c.MaxBytes
	}
	for _, c := range bus.BucketConfigs(names, l) {
		perMesh += c.MaxBytes
	}
	meshes := int(free/perMesh) + 1
	if meshes > 12 {
		t.Skipf("the disk has %d GiB free: %d meshes would be needed to exceed it", free>>30, meshes)
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "store-test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for i := range meshes {
		if err := bus.Provision(ctx, c.JS, protocol.NewNames(fmt.Sprintf("m%d", i)), l); err != nil {
			t.Fatalf("mesh %d of %d (%d GiB reserved each, %d GiB free): %v", i+1, meshes, perMesh>>30, free>>30, err)
		}
	}
}
