// Package kvstore is the embedded default memory.Store: entries live in the mesh's JetStream KV
// bucket `memory` (replicated with the cluster, compare-and-set on revision), and each process
// keeps an in-memory vector index that a KV watch rebuilds on start and keeps current, so every
// memoryd replica on one bucket answers the same searches.
package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// metaKey holds the store's embedding model id and dimension. Entry ids are hex, so a key with an
// underscore never collides with one.
const metaKey = "_model"

// milvusKeys is where the Milvus store keeps its entry records in the same bucket
// (milvusstore.KeyPrefix); they are not this store's entries.
const milvusKeys = "mv."

// recordVersion is the schema version of the values this package writes.
const recordVersion = 1

// Options configure Open.
type Options struct {
	// Model and Dim describe the embedder whose vectors this process writes and searches with.
	Model string
	Dim   int
	// Bucket overrides the mesh's memory bucket (names.Bucket(protocol.BucketMemory)).
	Bucket string
	// AnyModel opens a store written by another model instead of refusing; only migration does
	// this, and it must re-embed before it searches.
	AnyModel bool
	// ANNMin is the entry count from which searches use the inverted-file index (k-means
	// cells, only the nearest cells scanned) instead of an exact scan: 0 means DefaultANNMin,
	// negative never.
	ANNMin int
	// NProbe is the share of cells a search scans (0: DefaultNProbe), never fewer than
	// MinProbe cells.
	NProbe float64
}

// Defaults of Options.ANNMin and Options.NProbe, and the fewest cells a search scans. Recall
// follows the number of cells scanned more than their share: on the benchmark corpus 7–8 cells
// give recall@10 0.985 at 20k, 50k and 100k entries alike, 10 cells (3% of 316) 0.9925 at 100k
// (docs/benchmarks.md).
const (
	DefaultANNMin = 20_000
	DefaultNProbe = 0.03
	MinProbe      = 8
)

type record struct {
	V            int `msgpack:"v"`
	memory.Entry `msgpack:",inline"`
}

type meta struct {
	V     int    `msgpack:"v"`
	Model string `msgpack:"model"`
	Dim   int    `msgpack:"dim"`
}

// Store is a memory.Store over a JetStream KV bucket.
type Store struct {
	kv     jetstream.KeyValue
	bucket string

	mu    sync.RWMutex
	model string
	dim   int
	idx   *vindex
	// want is the model this process embeds with ("" when opened for migration); a store that
	// another process migrates away from it refuses further use.
	want string
	// gone holds, per deleted id, the revision at or below which a late watch update is stale.
	gone map[string]uint64

	// applied is the last bucket revision the watch has applied.
	applied atomic.Uint64

	js        jetstream.JetStream
	watcher   jetstream.KeyWatcher
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ memory.Store = (*Store)(nil)

// Open opens (creating the model record on first use) the memory bucket and loads its index.
// A bucket written by another model is refused with memory.ErrModelMismatch unless AnyModel.
func Open(ctx context.Context, js jetstream.JetStream, names protocol.Names, opt Options) (*Store, error) {
	if opt.Model == "" || opt.Dim <= 0 {
		return nil, fmt.Errorf("open memory KV store: embedding model and dimension are required (got %q, %d)", opt.Model, opt.Dim)
	}
	bucket := opt.Bucket
	if bucket == "" {
		bucket = names.Bucket(protocol.BucketMemory)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open memory KV bucket %s (is the mesh provisioned?): %w", bucket, err)
	}
	s := &Store{js: js, kv: kv, bucket: bucket, gone: map[string]uint64{}, done: make(chan struct{})}
	if err := s.checkModel(ctx, opt); err != nil {
		return nil, err
	}
	s.idx = newIndex(s.model, s.dim)
	s.idx.annMin, s.idx.nprobeShare = opt.ANNMin, opt.NProbe
	if s.idx.annMin == 0 {
		s.idx.annMin = DefaultANNMin
	}
	if s.idx.nprobeShare <= 0 {
		s.idx.nprobeShare = DefaultNProbe
	}
	s.idx.annDeferred = true
	if !opt.AnyModel {
		s.want = opt.Model
	}
	if err := s.startWatch(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) checkModel(ctx context.Context, opt Options) error {
	want := meta{V: recordVersion, Model: opt.Model, Dim: opt.Dim}
	var got *meta // the model on record; nil when this process recorded it
	_, err := bus.UpdateKV(ctx, s.kv, metaKey, func(cur jetstream.KeyValueEntry) ([]byte, error) {
		got = nil
		if cur == nil {
			return msgpack.Marshal(want)
		}
		m, err := decodeMeta(cur.Value())
		if err != nil {
			return nil, fmt.Errorf("decode embedding model record of %s: %w", s.bucket, err)
		}
		got = &m // another replica recorded the model first: check against it
		return nil, bus.ErrKeep
	})
	if err != nil {
		return fmt.Errorf("record embedding model in %s: %w", s.bucket, err)
	}
	if got == nil {
		s.model, s.dim = opt.Model, opt.Dim
		return nil
	}
	if (got.Model != opt.Model || got.Dim != opt.Dim) && !opt.AnyModel {
		return mismatch(s.bucket, *got, opt)
	}
	s.model, s.dim = got.Model, got.Dim
	return nil
}

func mismatch(bucket string, got meta, opt Options) error {
	return fmt.Errorf("%w: KV bucket %s holds %d-dim vectors of %q, but this process embeds with %q (%d dims); "+
		"run `skein memory migrate` to re-embed every entry with the current model, or configure the old embedder back",
		memory.ErrModelMismatch, bucket, got.Dim, got.Model, opt.Model, opt.Dim)
}

// startWatch replays the bucket into the index and keeps applying changes in the background.
func (s *Store) startWatch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.Background())
	w, err := s.kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("watch memory bucket %s: %w", s.bucket, err)
	}
	s.watcher, s.cancel = w, cancel
	// Initial values end with a nil marker; until then the index is not yet complete.
	for {
		select {
		case upd, ok := <-w.Updates():
			if !ok {
				cancel()
				return fmt.Errorf("watch memory bucket %s: closed during initial load", s.bucket)
			}
			if upd == nil {
				s.mu.Lock()
				s.idx.annResume()
				s.mu.Unlock()
				go s.follow()
				return nil
			}
			s.apply(upd)
		case <-ctx.Done():
			_ = w.Stop()
			cancel()
			return fmt.Errorf("load memory index from %s: %w", s.bucket, ctx.Err())
		}
	}
}

func (s *Store) follow() {
	defer close(s.done)
	for upd := range s.watcher.Updates() {
		if upd != nil {
			s.apply(upd)
		}
	}
}

func (s *Store) apply(upd jetstream.KeyValueEntry) {
	defer s.applied.Store(upd.Revision())
	key := upd.Key()
	if strings.HasPrefix(key, milvusKeys) {
		return
	}
	if key == metaKey {
		if m, err := decodeMeta(upd.Value()); err == nil && upd.Operation() == jetstream.KeyValuePut {
			s.mu.Lock()
			s.model, s.dim = m.Model, m.Dim
			s.idx.setModel(m.Model, m.Dim)
			s.mu.Unlock()
		}
		return
	}
	rev := upd.Revision()
	if upd.Operation() != jetstream.KeyValuePut {
		s.mu.Lock()
		s.remove(key, rev)
		s.mu.Unlock()
		return
	}
	// This process's own writes come back through the watch; skip decoding what it holds.
	s.mu.RLock()
	cur, ok := s.idx.get(key)
	skip := ok && cur.Revision >= rev
	s.mu.RUnlock()
	if skip {
		return
	}
	e, err := decode(upd.Value())
	if err != nil {
		return // a value this build cannot read is not searchable; Get reports the error
	}
	e.Revision = rev
	s.mu.Lock()
	s.insert(e)
	s.mu.Unlock()
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	err := msgpack.Unmarshal(b, &m)
	return m, err
}

// insert keeps the newest revision of an entry; callers hold mu.
func (s *Store) insert(e memory.Entry) {
	if g, ok := s.gone[e.ID]; ok {
		if e.Revision <= g {
			return
		}
		delete(s.gone, e.ID)
	}
	if cur, ok := s.idx.get(e.ID); ok && cur.Revision >= e.Revision {
		return
	}
	s.idx.put(e)
}

// remove drops an entry deleted at revision rev; callers hold mu.
func (s *Store) remove(id string, rev uint64) {
	if cur, ok := s.idx.get(id); ok && cur.Revision > rev {
		return
	}
	s.idx.del(id)
	if rev > s.gone[id] {
		s.gone[id] = rev
	}
}

func decode(b []byte) (memory.Entry, error) {
	var r record
	if err := msgpack.Unmarshal(b, &r); err != nil {
		return memory.Entry{}, fmt.Errorf("decode memory entry: %w", err)
	}
	if r.V != recordVersion {
		return memory.Entry{}, fmt.Errorf("decode memory entry %s: schema version %d, this build reads %d", r.ID, r.V, recordVersion)
	}
	return r.Entry, nil
}

// stale reports a store migrated to another model after this process opened it; callers hold mu.
func (s *Store) stale() error {
	if s.want == "" || s.model == s.want {
		return nil
	}
	return fmt.Errorf("%w: KV bucket %s was migrated to %q while this process embeds with %q; restart it with that embedder",
		memory.ErrModelMismatch, s.bucket, s.model, s.want)
}

// Model implements memory.Store.
func (s *Store) Model() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.model
}

// Dim is the vector dimension of the store.
func (s *Store) Dim() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dim
}

// Len is the number of entries in the local index.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.idx.len()
}

// Get implements memory.Store; it reads the bucket, not the index, so it sees every replica's
// latest write.
func (s *Store) Get(ctx context.Context, id string) (memory.Entry, error) {
	if !validKey(id) {
		return memory.Entry{}, fmt.Errorf("get memory entry %q: %w", id, memory.ErrNotFound)
	}
	ent, err := s.kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return memory.Entry{}, fmt.Errorf("get memory entry %s: %w", id, memory.ErrNotFound)
		}
		return memory.Entry{}, fmt.Errorf("get memory entry %s: %w", id, err)
	}
	e, err := decode(ent.Value())
	if err != nil {
		return memory.Entry{}, err
	}
	e.Revision = ent.Revision()
	return e, nil
}

// validKey reports whether id can be a key of the bucket; the length bound keeps a key's
// subject within what the server accepts (protocol.MaxMemoryID).
func validKey(id string) bool {
	if id == "" || id == metaKey || len(id) > protocol.MaxMemoryID {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '=') {
			return false
		}
	}
	return true
}

func (s *Store) check(e *memory.Entry) error {
	if !validKey(e.ID) {
		return fmt.Errorf("put memory entry: id %q may hold only letters, digits, '-', '_' and '='", e.ID)
	}
	s.mu.RLock()
	model, dim := s.model, s.dim
	err := s.stale()
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	if e.Model == "" {
		e.Model = model
	}
	if e.Model != model {
		return fmt.Errorf("put memory entry %s: vector from %q into a store of %q: %w", e.ID, e.Model, model, memory.ErrModelMismatch)
	}
	if len(e.Embedding) != dim {
		return fmt.Errorf("put memory entry %s: embedding has %d dimensions, the store holds %d", e.ID, len(e.Embedding), dim)
	}
	if invNorm(e.Embedding) == 0 {
		return fmt.Errorf("put memory entry %s: zero embedding", e.ID)
	}
	return memory.CheckKind(e)
}

// Put implements memory.Store: Create for revision 0, Update against the revision otherwise.
func (s *Store) Put(ctx context.Context, e memory.Entry) (memory.Entry, error) {
	if err := s.check(&e); err != nil {
		return memory.Entry{}, err
	}
	b, err := msgpack.Marshal(record{V: recordVersion, Entry: e})
	if err != nil {
		return memory.Entry{}, fmt.Errorf("encode memory entry %s: %w", e.ID, err)
	}
	var rev uint64
	if e.Revision == 0 {
		rev, err = s.kv.Create(ctx, e.ID, b)
		if bus.IsConflict(err) {
			return memory.Entry{}, fmt.Errorf("create memory entry %s: it exists: %w", e.ID, memory.ErrConflict)
		}
	} else {
		rev, err = s.kv.Update(ctx, e.ID, b, e.Revision)
		if bus.IsConflict(err) {
			return memory.Entry{}, fmt.Errorf("update memory entry %s at revision %d: %w", e.ID, e.Revision, memory.ErrConflict)
		}
	}
	if err != nil {
		return memory.Entry{}, fmt.Errorf("put memory entry %s: %w", e.ID, err)
	}
	e.Revision = rev
	// Apply locally now so this process reads its own write; the watch brings the same revision
	// later and is ignored then.
	s.mu.Lock()
	s.insert(e)
	s.mu.Unlock()
	return e, nil
}

// Delete implements memory.Store; deleting a missing entry is not an error.
func (s *Store) Delete(ctx context.Context, id string) error {
	if !validKey(id) {
		return nil
	}
	ent, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete memory entry %s: %w", id, err)
	}
	if err := s.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete memory entry %s: %w", id, err)
	}
	s.mu.Lock()
	s.remove(id, ent.Revision())
	s.mu.Unlock()
	return nil
}

// Search implements memory.Store from the local index: an exact scan, or from ANNMin entries
// on, the nearest NProbe share of the inverted-file cells (exact again when a filter leaves
// fewer than k matches there).
func (s *Store) Search(ctx context.Context, vec []float32, k int, f memory.Filter) ([]memory.Hit, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.stale(); err != nil {
		return nil, err
	}
	if len(vec) != s.dim {
		return nil, fmt.Errorf("search memory: query has %d dimensions, the store holds %d", len(vec), s.dim)
	}
	if k <= 0 {
		return nil, nil
	}
	qn := invNorm(vec)
	if qn == 0 {
		return nil, fmt.Errorf("search memory: zero query vector")
	}
	q := make([]float32, len(vec))
	for i, x := range vec {
		q[i] = x * qn
	}
	cands := s.idx.search(q, k, &f)
	hits := make([]memory.Hit, len(cands))
	for i, c := range cands {
		hits[i] = memory.Hit{Entry: memory.Clone(s.idx.entries[c.slot]), Score: float64(c.score)}
	}
	return hits, ctx.Err()
}

// List implements memory.Store from the local index.
func (s *Store) List(ctx context.Context, f memory.Filter) ([]memory.Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []memory.Entry
	for _, i := range s.idx.list(&f) {
		out = append(out, memory.Clone(s.idx.entries[i]))
	}
	slices.SortFunc(out, func(a, b memory.Entry) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out, ctx.Err()
}

// Sync waits until the index has applied every write the bucket held when Sync was called, so a
// caller sees other replicas' writes up to now (its own are visible at once).
func (s *Store) Sync(ctx context.Context) error {
	str, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		return fmt.Errorf("sync memory index: %w", err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		return fmt.Errorf("sync memory index: %w", err)
	}
	last := info.State.LastSeq
	for s.applied.Load() < last {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sync memory index to revision %d (at %d): %w", last, s.applied.Load(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Close stops the watch. A connection that closed first has stopped it already.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		_ = s.watcher.Stop()
		s.cancel()
		<-s.done
	})
	return nil
}

// ANNCells is how many inverted-file cells the local index searches through (0: it scans
// exactly, below Options.ANNMin entries).
func (s *Store) ANNCells() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.idx.cent == nil {
		return 0
	}
	return len(s.idx.cells)
}

// ANNProbe is how many cells a search of the local index scans (0: it scans exactly).
func (s *Store) ANNProbe() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.idx.cent == nil {
		return 0
	}
	return s.idx.nprobe
}
