package stores_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/stores"
)

func TestOpenKVAndMigrate(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Default().Memory
	old := embedtest.Hash{Dimensions: 16, ID: "old"}
	s, err := stores.Open(ctx, cfg, m.Conn.JS, m.Names, stores.Options{Model: old.Model(), Dim: old.Dim()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*kvstore.Store); !ok {
		t.Fatalf("default store is %T", s)
	}
	v, _ := old.Embed(ctx, []string{"retry on 503"})
	e := memory.Entry{ID: memory.EntryID("a", "avoid", "retry on 503"), Agent: "a", Text: "retry on 503", Polarity: "avoid",
		Tier: "tactical", Status: memory.StatusActive, Embedding: v[0]}
	if _, err := s.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	s.Close()
	cur := embedtest.Hash{Dimensions: 32, ID: "new"}
	if _, err := stores.Open(ctx, cfg, m.Conn.JS, m.Names, stores.Options{Model: cur.Model(), Dim: cur.Dim()}); !errors.Is(err, memory.ErrModelMismatch) {
		t.Fatalf("want mismatch, got %v", err)
	}
	s, err = stores.Open(ctx, cfg, m.Conn.JS, m.Names, stores.Options{Model: cur.Model(), Dim: cur.Dim(), AnyModel: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := memory.Migrate(ctx, s, cur); err != nil || n != 1 {
		t.Fatalf("migrate: %d, %v", n, err)
	}
	cfg.Store = "nosuch"
	if _, err := stores.Open(ctx, cfg, m.Conn.JS, m.Names, stores.Options{Model: "x", Dim: 2}); err == nil {
		t.Fatal("unknown store accepted")
	}
}
