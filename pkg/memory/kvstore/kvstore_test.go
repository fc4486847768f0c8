package kvstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
)

func open(t *testing.T, m *bustest.Mesh, model string, dim int, anyModel bool) (*kvstore.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := m.Connect(t, "kvstore-test")
	s, err := kvstore.Open(ctx, conn.JS, m.Names, kvstore.Options{Model: model, Dim: dim, AnyModel: anyModel})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func openB(b *testing.B, m *bustest.Mesh) *kvstore.Store {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := kvstore.Open(ctx, m.Conn.JS, m.Names, kvstore.Options{Model: "bench", Dim: benchDim})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, model string, dim int) memory.Store {
		s, err := open(t, bustest.Start(t), model, dim, false)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return s
	})
}

func TestReopenAndReplicas(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T) func(string, int) (memory.Store, error) {
		m := bustest.Start(t)
		return func(model string, dim int) (memory.Store, error) {
			s, err := open(t, m, model, dim, false)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

func TestMigrate(t *testing.T) {
	storetest.RunMigrate(t, func(t *testing.T) func(string, int, bool) (memory.Store, error) {
		m := bustest.Start(t)
		return func(model string, dim int, anyModel bool) (memory.Store, error) {
			s, err := open(t, m, model, dim, anyModel)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

// TestReplicaRefusesAfterMigration: a memoryd still running the old embedder stops serving
// (instead of comparing vectors of two models) once another process migrates the bucket.
func TestReplicaRefusesAfterMigration(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := embedtest.Hash{Dimensions: 8, ID: "old"}
	cur := embedtest.Hash{Dimensions: 8, ID: "new"}
	a, err := open(t, m, old.Model(), old.Dim(), false)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := old.Embed(ctx, []string{"retry on 503"})
	e := storetest.NewEntry("coder", "retry on 503", v[0])
	e.Model = old.Model()
	if _, err := a.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	b, err := open(t, m, cur.Model(), cur.Dim(), true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := memory.Migrate(ctx, b, cur); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Search(ctx, v[0], 1, memory.Filter{}); !errors.Is(err, memory.ErrModelMismatch) {
		t.Fatalf("search on the old replica: %v, want ErrModelMismatch", err)
	}
	e2 := storetest.NewEntry("coder", "another", v[0])
	e2.Model = ""
	if _, err := a.Put(ctx, e2); !errors.Is(err, memory.ErrModelMismatch) {
		t.Fatalf("put on the old replica: %v, want ErrModelMismatch", err)
	}
	q, _ := cur.Embed(ctx, []string{"retry on 503"})
	if hits, err := b.Search(ctx, q[0], 1, memory.Filter{}); err != nil || len(hits) != 1 {
		t.Fatalf("migrated store: %v, %v", hits, err)
	}
}
