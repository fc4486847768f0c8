package milvusstore_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestMain shares one Milvus server among every test of the run (and with other test binaries
// running at the same time), and lets go of it at the end.
func TestMain(m *testing.M) { os.Exit(milvustest.Main(m)) }

var seq atomic.Int64

// prefix gives each test fresh collections on the one server of its top-level test.
func prefix() string { return fmt.Sprintf("t%d_%d", time.Now().UnixNano()%1e9, seq.Add(1)) }

// env is one Milvus server and one NATS mesh (the memory bucket) shared by a top-level test.
type env struct {
	srv  *milvustest.Shared
	mesh *bustest.Mesh
}

func newEnv(t testing.TB) env {
	return env{srv: milvustest.ServerFor(t), mesh: bustest.Start(t)}
}

func (v env) opts(t testing.TB, pfx, model string, dim int, anyModel bool) milvusstore.Options {
	kv, err := bus.KV(context.Background(), v.mesh.Connect(t, "milvusstore-test").JS, v.mesh.Names, protocol.BucketMemory)
	if err != nil {
		t.Fatal(err)
	}
	return milvusstore.Options{Addr: v.srv.Addr, KV: kv, Prefix: pfx, Model: model, Dim: dim, AnyModel: anyModel,
		Partitions: 4}
}

func open(t *testing.T, v env, pfx, model string, dim int, anyModel bool) (*milvusstore.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s, err := milvusstore.Open(ctx, v.opts(t, pfx, model, dim, anyModel))
	if err != nil {
		return nil, fmt.Errorf("%w (server log: %s)", err, tail(v.srv.Log()))
	}
	t.Cleanup(func() { s.Close() })
	return s, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

func TestContract(t *testing.T) {
	v := newEnv(t)
	storetest.Run(t, func(t *testing.T, model string, dim int) memory.Store {
		s, err := open(t, v, prefix(), model, dim, false)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return s
	})
}

func TestReopen(t *testing.T) {
	v := newEnv(t)
	storetest.RunReopen(t, func(t *testing.T) func(string, int) (memory.Store, error) {
		pfx := prefix()
		return func(model string, dim int) (memory.Store, error) {
			s, err := open(t, v, pfx, model, dim, false)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

func TestMigrate(t *testing.T) {
	v := newEnv(t)
	storetest.RunMigrate(t, func(t *testing.T) func(string, int, bool) (memory.Store, error) {
		pfx := prefix()
		return func(model string, dim int, anyModel bool) (memory.Store, error) {
			s, err := open(t, v, pfx, model, dim, anyModel)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

// TestListBeyondOneQueryWindow: List splits by id prefix when a query fills Milvus' result window.
func TestListBeyondOneQueryWindow(t *testing.T) {
	v := newEnv(t)
	s, err := open(t, v, prefix(), "bench", 16, false)
	if err != nil {
		t.Fatal(err)
	}
	es := storetest.RandomEntries(200, 16, 5)
	// Ids with characters that are wildcards in LIKE, and 40 under one prefix to force a second split.
	for i, id := range []string{"k_1", "k-2", "K=3", "__", "_"} {
		es[i].ID = id
	}
	for i := range 40 {
		es[10+i].ID = fmt.Sprintf("ab_%02d", i)
	}
	if err := s.PutBatch(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	defer milvusstore.SetQueryWindow(30)() // 200 entries: one split into 64 id prefixes
	got, err := s.List(context.Background(), memory.Filter{Status: memory.StatusAny})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(es) {
		t.Fatalf("listed %d of %d entries", len(got), len(es))
	}
	seen := map[string]bool{}
	for _, e := range got {
		seen[e.ID] = true
	}
	for _, e := range es {
		if !seen[e.ID] {
			t.Fatalf("entry %s missing", e.ID)
		}
	}
}

// TestFlushOfASmallCollection: the server never indexes a segment under 1,024 rows and serves
// it as it is, so Flush must not wait for its index (it did, until its deadline).
func TestFlushOfASmallCollection(t *testing.T) {
	v := newEnv(t)
	s, err := open(t, v, prefix(), "bench", 16, false)
	if err != nil {
		t.Fatal(err)
	}
	es := storetest.RandomEntries(200, 16, 9)
	if err := s.PutBatch(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush of %d entries: %v", len(es), err)
	}
	got, err := s.List(ctx, memory.Filter{Status: memory.StatusAny})
	if err != nil || len(got) != len(es) {
		t.Fatalf("after the flush: %d of %d entries listed, %v", len(got), len(es), err)
	}
}

// TestRebuildsCollectionFromBeforeKinds: a collection written before entry kinds has no kind
// field (Milvus 2.3 cannot add one); Open drops it and refills the new one from the records, so
// every entry is searchable again, filtered by kind.
func TestRebuildsCollectionFromBeforeKinds(t *testing.T) {
	v := newEnv(t)
	pfx := prefix()
	s, err := open(t, v, pfx, storetest.Model, storetest.Dim, false)
	if err != nil {
		t.Fatal(err)
	}
	g := storetest.NewEntry("coder", "Pass --fix to lint.", storetest.Axis(0, 1, 0))
	c := storetest.NewEntry("coder", "Lint the repository", storetest.Axis(0, 1, 0.1))
	c.ID, c.Kind, c.Case = "case-1", memory.KindCase, &protocol.CaseBody{Intent: c.Text, Outcome: protocol.OutcomeSuccess, Quality: 0.9}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, e := range []memory.Entry{g, c} {
		if _, err := s.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// The old schema: every field but kind.
	mc, err := client.NewClient(ctx, client.Config{Address: v.srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	coll := pfx + "_entries"
	if err := mc.DropCollection(ctx, coll); err != nil {
		t.Fatal(err)
	}
	old := entity.NewSchema().WithName(coll).
		WithField(entity.NewField().WithName("id").WithDataType(entity.FieldTypeVarChar).WithMaxLength(128).WithIsPrimaryKey(true)).
		WithField(entity.NewField().WithName("agent").WithDataType(entity.FieldTypeVarChar).WithMaxLength(256)).
		WithField(entity.NewField().WithName("vector").WithDataType(entity.FieldTypeFloatVector).WithDim(int64(storetest.Dim)))
	if err := mc.CreateCollection(ctx, old, 1); err != nil {
		t.Fatal(err)
	}
	s2, err := open(t, v, pfx, storetest.Model, storetest.Dim, false)
	if err != nil {
		t.Fatal(err)
	}
	if !s2.Rebuilt() {
		t.Fatal("Open did not report rebuilding the collection without a kind field")
	}
	for kind, want := range map[string]string{"": g.Text, memory.KindCase: c.Text} {
		poll.Eventually(t, 30*time.Second, "kind "+kind+" after the rebuild", func() error {
			hits, err := s2.Search(ctx, storetest.Axis(0, 1, 0), 10, memory.Filter{Agent: "coder", Kind: kind})
			if err != nil {
				return err
			}
			if len(hits) != 1 || hits[0].Entry.Text != want {
				return fmt.Errorf("kind %q: %d hits, want %q", kind, len(hits), want)
			}
			return nil
		})
	}
}
