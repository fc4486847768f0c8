package kvstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
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
