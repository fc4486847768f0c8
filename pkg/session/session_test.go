package session_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
)

func open(t *testing.T) (context.Context, *session.Records, *bustest.Mesh) {
	t.Helper()
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	r, err := session.Open(ctx, m.Conn.JS, m.Names)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, r, m
}

func record(id string) protocol.Session {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return protocol.Session{SessionID: id, Agent: "assistant", Task: "greet", Status: protocol.StatusQueued, Created: now, Updated: now}
}

// A record is created once, read back as written, and a missing one says so.
func TestCreateAndGet(t *testing.T) {
	ctx, r, _ := open(t)
	s := record("s1")
	if err := r.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := r.Create(ctx, s); !errors.Is(err, session.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	got, err := r.Get(ctx, "s1")
	if err != nil || got.Task != s.Task || got.Status != s.Status || !got.Created.Equal(s.Created) {
		t.Fatalf("get: %+v, %v; want %+v", got, err, s)
	}
	if _, err := r.Get(ctx, "nobody"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("get of an unknown session: %v, want ErrNotFound", err)
	}
}

// Concurrent changes of one record all land (each is applied to the record another left), a
// change that reports no change writes nothing, and change's own error comes back unwrapped.
func TestUpdateAppliesEveryConcurrentChange(t *testing.T) {
	ctx, r, _ := open(t)
	if err := r.Create(ctx, record("tree")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const children = 20
	errs := make(chan error, children)
	for i := range children {
		wg.Go(func() {
			child := fmt.Sprintf("child-%d", i)
			_, changed, err := r.Update(ctx, "tree", func(s *protocol.Session) (bool, error) {
				s.Children = append(s.Children, child)
				return true, nil
			})
			if err != nil || !changed {
				errs <- fmt.Errorf("add %s: changed %v, %v", child, changed, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := r.Get(ctx, "tree")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Children) != children {
		t.Fatalf("%d children recorded, want %d: %v", len(got.Children), children, got.Children)
	}
	if !got.Updated.After(got.Created) {
		t.Errorf("updated %v, not after created %v", got.Updated, got.Created)
	}

	same, changed, err := r.Update(ctx, "tree", func(s *protocol.Session) (bool, error) { return false, nil })
	if err != nil || changed || !same.Updated.Equal(got.Updated) || len(same.Children) != children {
		t.Fatalf("an update without change: changed %v, %v, record %+v", changed, err, same)
	}
	own := errors.New("refused")
	if _, changed, err := r.Update(ctx, "tree", func(s *protocol.Session) (bool, error) { return true, own }); err != own || changed {
		t.Fatalf("change's error: %v (changed %v), want it as it was", err, changed)
	}
	if _, _, err := r.Update(ctx, "nobody", func(s *protocol.Session) (bool, error) { return true, nil }); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("update of an unknown session: %v, want ErrNotFound", err)
	}
}

// A record that does not decode is reported as such by every reader, and skipped by Each.
func TestUnreadableRecords(t *testing.T) {
	ctx, r, m := open(t)
	kv, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "garbled", []byte("not msgpack")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, "garbled"); !errors.Is(err, session.ErrUnreadable) {
		t.Errorf("get: %v, want ErrUnreadable", err)
	}
	if _, _, err := r.Update(ctx, "garbled", func(*protocol.Session) (bool, error) { return true, nil }); !errors.Is(err, session.ErrUnreadable) {
		t.Errorf("update: %v, want ErrUnreadable", err)
	}
	if c := r.Children(ctx, "garbled"); c != nil {
		t.Errorf("children of an unreadable record: %v", c)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := r.Create(ctx, record(id)); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	if err := r.Each(ctx, func(s protocol.Session) bool { ids = append(ids, s.SessionID); return true }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("each: %v, want the three readable records", ids)
	}
	n := 0
	if err := r.Each(ctx, func(protocol.Session) bool { n++; return false }); err != nil || n != 1 {
		t.Errorf("each stopped after the first: %d calls, %v", n, err)
	}
}

// Watch gives the current record first, then each change, until fn has what it waits for; a
// record that never gets there leaves Watch at ctx's end with ctx's error.
func TestWatchFollowsOneRecord(t *testing.T) {
	ctx, r, _ := open(t)
	if err := r.Create(ctx, record("w1")); err != nil {
		t.Fatal(err)
	}
	var seen []protocol.SessionStatus
	first := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Watch(ctx, "w1", func(s protocol.Session) bool {
			seen = append(seen, s.Status)
			if len(seen) == 1 {
				close(first)
			}
			return s.Status != protocol.StatusDone
		})
	}()
	<-first
	for _, st := range []protocol.SessionStatus{protocol.StatusRunning, protocol.StatusDone} {
		if _, _, err := r.Update(ctx, "w1", func(s *protocol.Session) (bool, error) { s.Status = st; return true, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("watch: %v", err)
	}
	want := []protocol.SessionStatus{protocol.StatusQueued, protocol.StatusRunning, protocol.StatusDone}
	if !slices.Equal(seen, want) {
		t.Fatalf("statuses seen %v, want %v", seen, want)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := r.Watch(short, "w1", func(s protocol.Session) bool { return s.Status != protocol.StatusQueued })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("watch for a state that never comes: %v, want the deadline", err)
	}
}
