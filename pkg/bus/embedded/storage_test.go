package embedded_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/bus/embedded"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// On a real filesystem that fills up: while free space is under the reserve the mesh says
// "low" and still writes; once JetStream cannot write, it says "full", naming the stream, and the
// server's own error reaches the log; once space is freed JetStream is restarted in place, writes
// work again without a process restart, and every message acknowledged before is still there.
func TestStorageWatchOnAFullDisk(t *testing.T) {
	const reserve = 4 << 20
	disk := bustest.Tmpfs(t, 32<<20)
	var logs devtest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := embedded.Start(embedded.Options{StoreDir: filepath.Join(disk, "nats"), Listen: "127.0.0.1:0", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := bus.Connect(ctx, srv.URL(), "storage-test", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	names := protocol.NewNames("")
	if err := bus.Provision(ctx, c.JS, names, bus.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.WatchStorage(ctx, c.NC, names, embedded.StorageOptions{Reserve: reserve, Interval: 50 * time.Millisecond, Logger: log}); err != nil {
		t.Fatal(err)
	}
	state := func(want protocol.StorageState) func() error {
		return func() error {
			if rep := c.Storage(ctx, names, true); rep.State != want {
				return fmt.Errorf("state %q (%s), want %q", rep.State, rep.Reason, want)
			}
			return nil
		}
	}
	poll.Eventually(t, 5*time.Second, "storage ok", state(protocol.StorageOK))

	acked := 0
	payload := bytes.Repeat([]byte("x"), 4096)
	publish := func() error {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		_, err := c.JS.Publish(pctx, names.Task("a"), payload)
		if err == nil {
			acked++
		}
		return err
	}
	for range 5 {
		if err := publish(); err != nil {
			t.Fatal(err)
		}
	}
	freeLow := bustest.Fill(t, disk, reserve/2)
	poll.Eventually(t, 5*time.Second, "storage low under the reserve", state(protocol.StorageLow))
	if err := publish(); err != nil {
		t.Fatalf("a write under the reserve (the disk is not full yet): %v", err)
	}
	freeAll := bustest.Fill(t, disk, 0)
	var failed error
	for i := 0; i < 200 && failed == nil; i++ {
		failed = publish()
	}
	if failed == nil {
		t.Fatal("200 publishes onto a full disk all succeeded")
	}
	poll.Eventually(t, 5*time.Second, "storage full", state(protocol.StorageFull))
	rep := c.Storage(ctx, names, true)
	if !strings.Contains(strings.Join(rep.Streams, ","), names.Stream(protocol.StreamTasks)) || rep.Reason == "" {
		t.Errorf("full state %+v does not name the TASKS stream with a reason", rep)
	}
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the server's own error did not reach the log:\n%s", logs.String())
	}
	if rep.State.Accepting() {
		t.Error("a full store accepts new work")
	}

	freeAll()
	freeLow()
	poll.Eventually(t, 15*time.Second, "storage ok once space is freed", state(protocol.StorageOK))
	if rep := c.Storage(ctx, names, true); rep.Restarts < 1 {
		t.Errorf("JetStream restarts %d, want at least 1 to clear the write error", rep.Restarts)
	}
	poll.Eventually(t, 10*time.Second, "a write after space came back", publish)
	s, err := c.JS.Stream(ctx, names.Stream(protocol.StreamTasks))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(acked) {
		t.Errorf("TASKS holds %d messages, %d were acknowledged", info.State.Msgs, acked)
	}
	for _, want := range []string{"storage low", "storage full", "JetStream restarted in place", "JetStream writes again"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q", want)
		}
	}
}

// The storage subject answers an empty question with the state, and a request it cannot read
// with the reply's error and code (bad_request) and the same code's service error header.
func TestStorageAnswersAnUnreadableRequestWithItsCode(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.Server.WatchStorage(ctx, m.Conn.NC, m.Names, embedded.StorageOptions{}); err != nil {
		t.Fatal(err)
	}
	msg, err := m.Conn.NC.RequestWithContext(ctx, m.Names.Storage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var rep protocol.StorageReply
	if err := protocol.Unmarshal(msg.Data, &rep); err != nil || rep.State != protocol.StorageOK || rep.Err() != nil || msg.Header != nil {
		t.Fatalf("empty question: %+v %v headers %v", rep, err, msg.Header)
	}
	msg, err = m.Conn.NC.RequestWithContext(ctx, m.Names.Storage(), []byte("not msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	rep = protocol.StorageReply{}
	if err := protocol.Unmarshal(msg.Data, &rep); err != nil || rep.Code != protocol.CodeBadRequest || rep.State != "" {
		t.Fatalf("garbage: %+v %v", rep, err)
	}
	if got := msg.Header.Get(micro.ErrorCodeHeader); got != protocol.CodeBadRequest.ServiceCode() {
		t.Fatalf("garbage: headers %v", msg.Header)
	}
}
