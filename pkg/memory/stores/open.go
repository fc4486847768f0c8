// Package stores opens the memory.Store a configuration names. It lives apart from package
// memory because the stores import memory.
package stores

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Options say which embedding model the store must hold.
type Options struct {
	Model string
	Dim   int
	// AnyModel opens a store written by another model; only `skein memory migrate` sets it,
	// and then calls memory.Migrate before anything searches.
	AnyModel bool
}

// Open opens memory.store (kv, the default, on the mesh's JetStream; or milvus at
// memory.milvus_addr, with collections named after the namespace).
func Open(ctx context.Context, m config.Memory, js jetstream.JetStream, names protocol.Names, o Options) (memory.Store, error) {
	switch m.Store {
	case "", "kv":
		if js == nil {
			return nil, fmt.Errorf("memory.store kv needs a JetStream connection")
		}
		s, err := kvstore.Open(ctx, js, names, kvstore.Options{Model: o.Model, Dim: o.Dim, AnyModel: o.AnyModel})
		if err != nil {
			return nil, err
		}
		return s, nil
	case "milvus":
		if js == nil {
			return nil, fmt.Errorf("memory.store milvus needs a JetStream connection (entry records live in the memory bucket)")
		}
		kv, err := js.KeyValue(ctx, names.Bucket(protocol.BucketMemory))
		if err != nil {
			return nil, fmt.Errorf("open memory KV bucket %s (is the mesh provisioned?): %w", names.Bucket(protocol.BucketMemory), err)
		}
		s, err := milvusstore.Open(ctx, milvusstore.Options{Addr: m.MilvusAddr, KV: kv, Prefix: milvusstore.PrefixFor(names),
			Model: o.Model, Dim: o.Dim, AnyModel: o.AnyModel, Consistency: m.MilvusConsistency})
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		return nil, fmt.Errorf("memory.store %q: want kv or milvus", m.Store)
	}
}
