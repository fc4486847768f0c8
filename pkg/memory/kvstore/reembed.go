package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory"
)

// Reembed rewrites every entry with a vector from embed and then records model as the store's
// embedding model. Each entry is written with compare-and-set; one that a concurrent writer
// changed is read again and re-embedded. Until the model record flips, searches on every replica
// keep using the old vectors (entries already rewritten are skipped), so a crash half way leaves
// a store that works with the old model and a migration that can simply be run again.
func (s *Store) Reembed(ctx context.Context, model string, dim int, embed func(context.Context, []string) ([][]float32, error)) (int, error) {
	if model == "" || dim <= 0 {
		return 0, fmt.Errorf("re-embed %s: model and dimension are required", s.bucket)
	}
	lister, err := s.kv.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, fmt.Errorf("re-embed %s: list keys: %w", s.bucket, err)
	}
	var keys []string
	if lister != nil {
		for k := range lister.Keys() {
			if k != metaKey && !strings.HasPrefix(k, milvusKeys) {
				keys = append(keys, k)
			}
		}
		_ = lister.Stop() // after the channel closed the subscription is gone already
	}
	const batch = 64
	n := 0
	for start := 0; start < len(keys); start += batch {
		chunk := keys[start:min(start+batch, len(keys))]
		for attempt := 0; len(chunk) > 0; attempt++ {
			if attempt == 10 {
				return n, fmt.Errorf("re-embed %s: entries keep changing under migration: %w", s.bucket, memory.ErrConflict)
			}
			var es []memory.Entry
			for _, k := range chunk {
				e, err := s.Get(ctx, k)
				if errors.Is(err, memory.ErrNotFound) {
					continue
				}
				if err != nil {
					return n, fmt.Errorf("re-embed: %w", err)
				}
				es = append(es, e)
			}
			texts := make([]string, len(es))
			for i, e := range es {
				texts[i] = e.Text
			}
			vecs, err := embed(ctx, texts)
			if err != nil {
				return n, fmt.Errorf("re-embed %s: %w", s.bucket, err)
			}
			if len(vecs) != len(es) {
				return n, fmt.Errorf("re-embed %s: embedder returned %d vectors for %d texts", s.bucket, len(vecs), len(es))
			}
			var retry []string
			for i, e := range es {
				if len(vecs[i]) != dim {
					return n, fmt.Errorf("re-embed %s: vector of %d dims, want %d", s.bucket, len(vecs[i]), dim)
				}
				e.Embedding, e.Model = vecs[i], model
				b, err := msgpack.Marshal(record{V: recordVersion, Entry: e})
				if err != nil {
					return n, fmt.Errorf("encode memory entry %s: %w", e.ID, err)
				}
				rev, err := s.kv.Update(ctx, e.ID, b, e.Revision)
				if bus.IsConflict(err) {
					retry = append(retry, e.ID)
					continue
				}
				if err != nil {
					return n, fmt.Errorf("re-embed memory entry %s: %w", e.ID, err)
				}
				e.Revision = rev
				s.mu.Lock()
				s.insert(e)
				s.mu.Unlock()
				n++
			}
			chunk = retry
		}
	}
	b, err := msgpack.Marshal(meta{V: recordVersion, Model: model, Dim: dim})
	if err != nil {
		return n, err
	}
	if _, err := s.kv.Put(ctx, metaKey, b); err != nil {
		return n, fmt.Errorf("re-embed %s: record model %s: %w", s.bucket, model, err)
	}
	s.mu.Lock()
	s.model, s.dim, s.want = model, dim, model
	s.idx.setModel(model, dim)
	s.mu.Unlock()
	return n, nil
}
