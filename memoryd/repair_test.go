package memoryd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// TestMain lets go of the shared Milvus server (milvustest) when the tests end.
func TestMain(m *testing.M) { os.Exit(milvustest.Main(m)) }

// provisioned gives a test mesh its own namespace, so its Milvus collection (named after the
// namespace) is its own on the shared server.
func provisioned(t *testing.T, m *bustest.Mesh, ns string) protocol.Names {
	t.Helper()
	names := protocol.NewNames(ns)
	if err := bus.Provision(ctxT(t), m.Conn.JS, names, bus.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	return names
}

// milvusOf opens the Milvus store a mesh's memoryd would open.
func milvusOf(t *testing.T, m *bustest.Mesh, names protocol.Names, addr string, emb embedtest.Hash) *milvusstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kv, err := bus.KV(ctx, m.Conn.JS, names, protocol.BucketMemory)
	if err != nil {
		t.Fatal(err)
	}
	s, err := milvusstore.Open(ctx, milvusstore.Options{Addr: addr, KV: kv, Prefix: milvusstore.PrefixFor(names), Model: emb.Model(), Dim: emb.Dim()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func entry(t *testing.T, emb embedtest.Hash, agent, text string) memory.Entry {
	t.Helper()
	v, err := emb.Embed(context.Background(), []string{text})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	return memory.Entry{ID: memory.EntryID(agent, protocol.PolarityAvoid, text), Agent: agent, Text: text, Polarity: protocol.PolarityAvoid,
		Tier: protocol.TierTactical, Status: memory.StatusActive, Sessions: []string{"s-1"}, Hits: 1, Model: emb.Model(),
		Embedding: v[0], Source: memory.SourceMiner, Created: now, Updated: now}
}

// A new mesh pointed at a Milvus collection that another mesh filled (same namespace, so the
// same collection) has records for none of its rows but one: its memoryd reconciles the
// collection with its records when it starts, says in one line what it found, and from then on
// lists only its own entries; `skein memory repair` (the repair endpoint) then finds them in step.
func TestStartReconcilesACollectionWithItsRecords(t *testing.T) {
	srv := milvustest.ServerFor(t)
	emb := embedtest.Hash{}
	ns := fmt.Sprintf("rep%d", time.Now().UnixNano()%1e9)
	ctx := ctxT(t)

	old := bustest.Start(t)
	oldStore := milvusOf(t, old, provisioned(t, old, ns), srv.Addr, emb)
	for _, text := range []string{"Retry the upload after a 503.", "Quote paths with spaces.", "Use ISO dates in reports."} {
		if _, err := oldStore.Put(ctx, entry(t, emb, "demo", text)); err != nil {
			t.Fatal(err)
		}
	}

	m := bustest.Start(t)
	names := provisioned(t, m, ns)
	own := entry(t, emb, "demo", "Check the CSV exists before reading it.")
	if _, err := milvusOf(t, m, names, srv.Addr, emb).Put(ctx, own); err != nil {
		t.Fatal(err)
	}

	cfg := config.Default()
	cfg.Mesh.Namespace = ns
	cfg.Memory.Store, cfg.Memory.MilvusAddr = "milvus", srv.Addr
	var logs devtest.LogBuffer
	runMemoryd(t, m, memoryd.Deps{Names: names, Config: cfg, Embedder: emb}, &logs)
	const want = "1 records, 4 rows: 0 record(s) without a row indexed, 0 stale row(s) rewritten, 3 row(s) without a record deleted"
	poll.Eventually(t, 2*time.Minute, "memoryd's reconcile line", func() error {
		if !strings.Contains(logs.String(), `msg="memory store reconciled with its records" found="`+want+`"`) {
			return fmt.Errorf("no reconcile line yet:\n%s", logs.String())
		}
		return nil
	})
	if n := strings.Count(logs.String(), "memory store reconciled"); n != 1 {
		t.Fatalf("%d reconcile lines, want one:\n%s", n, logs.String())
	}

	c := memoryd.Client{NC: m.Conn.NC, Names: names, PerTry: time.Minute}
	es, err := c.ListAll(ctx, protocol.MemoryListRequest{Agent: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].ID != own.ID {
		t.Fatalf("the new mesh lists %d entries (%v), want only its own %s", len(es), es, own.ID)
	}
	rep, err := c.Repair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Repaired || rep.Store != "milvus" || rep.Records != 1 || rep.Rows != 1 || rep.Missing+rep.Stale+rep.Orphans != 0 {
		t.Fatalf("repair after the start's reconcile: %+v, want 1 record and 1 row in step", rep)
	}
}
