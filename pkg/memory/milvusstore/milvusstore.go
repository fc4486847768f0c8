// Package milvusstore is the memory.Store for large memories: entries in Milvus through
// milvus-sdk-go/v2, searched by COSINE similarity.
//
// Layout: one collection per tier (<prefix>_tactical and <prefix>_strategic), so the small,
// hot strategic set and the large, churning tactical set are indexed, loaded and compacted
// apart; agent, polarity, status and tools are scalar fields every search filters on (tools as
// an ARRAY<VARCHAR> matched with array_contains_any). A third collection, <prefix>_meta, records
// the embedding model id and dimension. Promotion moves an entry between the tier collections
// (write the new tier, then delete the old); a reader that meets both copies after a crash
// takes the higher revision.
//
// Compare-and-set: Milvus has no conditional write, so Put reads the stored revision, compares,
// and upserts with a new revision, all under a per-store lock. That is exact for every writer
// that goes through one Store value (one memoryd); two processes writing the same entry at the
// same instant can both pass the check. Run one memoryd per Milvus collection prefix, or use the
// KV store, when several writers must be safe.
package milvusstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Field names of the entry collections.
const (
	fID       = "id"
	fAgent    = "agent"
	fPolarity = "polarity"
	fStatus   = "status"
	fTools    = "tools"
	fRevision = "revision"
	fPayload  = "payload"
	fVector   = "vector"
)

const (
	maxTools   = 64
	maxToolLen = 128
	maxPayload = 65535
)

// queryWindow is Milvus' largest offset+limit for one query; a variable so a test can shrink it.
var queryWindow = 16384

var outputFields = []string{fID, fAgent, fPolarity, fStatus, fTools, fRevision, fPayload, fVector}

// Options configure Open.
type Options struct {
	// Addr is the Milvus gRPC address (host:port).
	Addr string
	// Prefix names the collections (default "skein_memory"; letters, digits and '_').
	Prefix string
	// Model and Dim describe the embedder whose vectors this process writes and searches with.
	Model string
	Dim   int
	// AnyModel opens a store written by another model (migration only).
	AnyModel bool
	// Index is "HNSW" (default) or "FLAT" (exact, for small memories).
	Index string
}

// Store is a memory.Store over Milvus.
type Store struct {
	c      client.Client
	prefix string
	index  string

	mu    sync.Mutex // serializes read-check-write; see the package comment
	model string
	dim   int
}

var _ memory.Reembedder = (*Store)(nil)

// PrefixFor derives the collection prefix of a mesh namespace.
func PrefixFor(names protocol.Names) string {
	b := names.Bucket(protocol.BucketMemory)
	return "skein_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, b)
}

// Open connects, creates the collections on first use and checks the recorded model.
func Open(ctx context.Context, opt Options) (*Store, error) {
	if opt.Model == "" || opt.Dim <= 0 {
		return nil, fmt.Errorf("open milvus memory store: embedding model and dimension are required (got %q, %d)", opt.Model, opt.Dim)
	}
	if opt.Addr == "" {
		return nil, errors.New("open milvus memory store: memory.milvus_addr is not set")
	}
	prefix := opt.Prefix
	if prefix == "" {
		prefix = "skein_memory"
	}
	idx := strings.ToUpper(opt.Index)
	if idx == "" {
		idx = "HNSW"
	}
	if idx != "HNSW" && idx != "FLAT" {
		return nil, fmt.Errorf("open milvus memory store: index %q (want HNSW or FLAT)", opt.Index)
	}
	c, err := client.NewClient(ctx, client.Config{Address: opt.Addr})
	if err != nil {
		return nil, fmt.Errorf("connect to milvus at %s: %w", opt.Addr, err)
	}
	s := &Store{c: c, prefix: prefix, index: idx}
	if err := s.openMeta(ctx, opt); err != nil {
		c.Close()
		return nil, err
	}
	for _, t := range []protocol.Tier{protocol.TierTactical, protocol.TierStrategic} {
		if err := s.ensureTier(ctx, t, s.dim); err != nil {
			c.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) coll(t protocol.Tier) string { return s.prefix + "_" + string(t) }
func (s *Store) metaColl() string            { return s.prefix + "_meta" }

var tiers = []protocol.Tier{protocol.TierTactical, protocol.TierStrategic}

func (s *Store) ensureTier(ctx context.Context, t protocol.Tier, dim int) error {
	name := s.coll(t)
	ok, err := s.c.HasCollection(ctx, name)
	if err != nil {
		return fmt.Errorf("milvus: has collection %s: %w", name, err)
	}
	if !ok {
		schema := entity.NewSchema().WithName(name).WithDescription("skein memory, " + string(t) + " tier").
			WithField(entity.NewField().WithName(fID).WithDataType(entity.FieldTypeVarChar).WithMaxLength(128).WithIsPrimaryKey(true)).
			WithField(entity.NewField().WithName(fAgent).WithDataType(entity.FieldTypeVarChar).WithMaxLength(256)).
			WithField(entity.NewField().WithName(fPolarity).WithDataType(entity.FieldTypeVarChar).WithMaxLength(32)).
			WithField(entity.NewField().WithName(fStatus).WithDataType(entity.FieldTypeVarChar).WithMaxLength(32)).
			WithField(entity.NewField().WithName(fTools).WithDataType(entity.FieldTypeArray).WithElementType(entity.FieldTypeVarChar).
				WithMaxCapacity(maxTools).WithMaxLength(maxToolLen)).
			WithField(entity.NewField().WithName(fRevision).WithDataType(entity.FieldTypeInt64)).
			WithField(entity.NewField().WithName(fPayload).WithDataType(entity.FieldTypeVarChar).WithMaxLength(maxPayload)).
			WithField(entity.NewField().WithName(fVector).WithDataType(entity.FieldTypeFloatVector).WithDim(int64(dim)))
		if err := s.c.CreateCollection(ctx, schema, 1, client.WithConsistencyLevel(entity.ClStrong)); err != nil {
			return fmt.Errorf("milvus: create collection %s: %w", name, err)
		}
		var idx entity.Index
		if s.index == "FLAT" {
			idx, err = entity.NewIndexFlat(entity.COSINE)
		} else {
			idx, err = entity.NewIndexHNSW(entity.COSINE, 16, 200)
		}
		if err != nil {
			return err
		}
		if err := s.c.CreateIndex(ctx, name, fVector, idx, false); err != nil {
			return fmt.Errorf("milvus: create index on %s: %w", name, err)
		}
	}
	if err := s.c.LoadCollection(ctx, name, false); err != nil {
		return fmt.Errorf("milvus: load collection %s: %w", name, err)
	}
	return nil
}

const metaKey = "model"

func (s *Store) openMeta(ctx context.Context, opt Options) error {
	name := s.metaColl()
	ok, err := s.c.HasCollection(ctx, name)
	if err != nil {
		return fmt.Errorf("milvus at %s: has collection %s: %w", opt.Addr, name, err)
	}
	if !ok {
		schema := entity.NewSchema().WithName(name).WithDescription("skein memory: embedding model of the entry collections").
			WithField(entity.NewField().WithName("key").WithDataType(entity.FieldTypeVarChar).WithMaxLength(64).WithIsPrimaryKey(true)).
			WithField(entity.NewField().WithName("model").WithDataType(entity.FieldTypeVarChar).WithMaxLength(512)).
			WithField(entity.NewField().WithName("dim").WithDataType(entity.FieldTypeInt64)).
			WithField(entity.NewField().WithName("v").WithDataType(entity.FieldTypeFloatVector).WithDim(2))
		if err := s.c.CreateCollection(ctx, schema, 1, client.WithConsistencyLevel(entity.ClStrong)); err != nil {
			return fmt.Errorf("milvus: create collection %s: %w", name, err)
		}
		idx, _ := entity.NewIndexFlat(entity.L2)
		if err := s.c.CreateIndex(ctx, name, "v", idx, false); err != nil {
			return fmt.Errorf("milvus: create index on %s: %w", name, err)
		}
	}
	if err := s.c.LoadCollection(ctx, name, false); err != nil {
		return fmt.Errorf("milvus: load collection %s: %w", name, err)
	}
	model, dim, found, err := s.readMeta(ctx)
	if err != nil {
		return err
	}
	if !found {
		if err := s.writeMeta(ctx, opt.Model, opt.Dim); err != nil {
			return err
		}
		s.model, s.dim = opt.Model, opt.Dim
		return nil
	}
	if (model != opt.Model || dim != opt.Dim) && !opt.AnyModel {
		return fmt.Errorf("%w: milvus collections %s_* hold %d-dim vectors of %q, but this process embeds with %q (%d dims); "+
			"run `skein memory migrate` to re-embed every entry with the current model, or configure the old embedder back",
			memory.ErrModelMismatch, s.prefix, dim, model, opt.Model, opt.Dim)
	}
	s.model, s.dim = model, dim
	return nil
}

func (s *Store) readMeta(ctx context.Context) (string, int, bool, error) {
	rs, err := s.c.Query(ctx, s.metaColl(), nil, `key == "`+metaKey+`"`, []string{"key", "model", "dim"},
		client.WithSearchQueryConsistencyLevel(entity.ClStrong))
	if err != nil {
		return "", 0, false, fmt.Errorf("milvus: read embedding model from %s: %w", s.metaColl(), err)
	}
	mc, dc := rs.GetColumn("model"), rs.GetColumn("dim")
	if mc == nil || mc.Len() == 0 {
		return "", 0, false, nil
	}
	model, err := mc.GetAsString(0)
	if err != nil {
		return "", 0, false, err
	}
	dim, err := dc.GetAsInt64(0)
	if err != nil {
		return "", 0, false, err
	}
	return model, int(dim), true, nil
}

func (s *Store) writeMeta(ctx context.Context, model string, dim int) error {
	_, err := s.c.Upsert(ctx, s.metaColl(), "",
		entity.NewColumnVarChar("key", []string{metaKey}),
		entity.NewColumnVarChar("model", []string{model}),
		entity.NewColumnInt64("dim", []int64{int64(dim)}),
		entity.NewColumnFloatVector("v", 2, [][]float32{{1, 0}}))
	if err != nil {
		return fmt.Errorf("milvus: record embedding model %s: %w", model, err)
	}
	return nil
}

// Model implements memory.Store.
func (s *Store) Model() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.model
}

// Close implements memory.Store.
func (s *Store) Close() error { return s.c.Close() }

// quote renders a string literal of a Milvus boolean expression.
func quote(v string) string { return strconv.Quote(v) }

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// expr turns a filter into a boolean expression; tier chooses the collection instead.
func expr(f memory.Filter) string {
	var parts []string
	if f.Agent != "" {
		parts = append(parts, fAgent+" == "+quote(f.Agent))
	}
	if f.Polarity != "" {
		parts = append(parts, fPolarity+" == "+quote(string(f.Polarity)))
	}
	switch f.Status {
	case memory.StatusAny:
	case "":
		parts = append(parts, fStatus+" == "+quote(string(memory.StatusActive)))
	default:
		parts = append(parts, fStatus+" == "+quote(string(f.Status)))
	}
	if len(f.Tools) > 0 {
		parts = append(parts, "array_contains_any("+fTools+", "+quoteList(f.Tools)+")")
	}
	if len(parts) == 0 {
		return fID + ` != ""`
	}
	return strings.Join(parts, " && ")
}

func (s *Store) tiersOf(f memory.Filter) []protocol.Tier {
	if f.Tier != "" {
		if !slices.Contains(tiers, f.Tier) {
			return nil
		}
		return []protocol.Tier{f.Tier}
	}
	return tiers
}

// payload is what the scalar fields do not carry.
type payload struct {
	Text         string        `json:"text"`
	Sessions     []string      `json:"sessions"`
	SessionCount int           `json:"session_count,omitempty"`
	Hits         int           `json:"hits"`
	Helpful      int           `json:"helpful"`
	Harmful      int           `json:"harmful"`
	Model        string        `json:"model"`
	Source       string        `json:"source"`
	SupersededBy string        `json:"superseded_by,omitempty"`
	Mined        []string      `json:"mined,omitempty"`
	Created      time.Time     `json:"created"`
	Updated      time.Time     `json:"updated"`
	LastUsed     time.Time     `json:"last_used"`
	Tier         protocol.Tier `json:"tier"`
}

func decodeRows(rs client.ResultSet, tier protocol.Tier) ([]memory.Entry, error) {
	idc := rs.GetColumn(fID)
	if idc == nil {
		return nil, nil
	}
	n := idc.Len()
	out := make([]memory.Entry, n)
	agent, pol, status := rs.GetColumn(fAgent), rs.GetColumn(fPolarity), rs.GetColumn(fStatus)
	rev, pl, vec := rs.GetColumn(fRevision), rs.GetColumn(fPayload), rs.GetColumn(fVector)
	tools, _ := rs.GetColumn(fTools).(*entity.ColumnVarCharArray)
	vc, _ := vec.(*entity.ColumnFloatVector)
	if agent == nil || pol == nil || status == nil || rev == nil || pl == nil || vc == nil || tools == nil {
		return nil, errors.New("milvus: result misses output fields")
	}
	for i := range n {
		e := &out[i]
		e.ID, _ = idc.GetAsString(i)
		e.Agent, _ = agent.GetAsString(i)
		p, _ := pol.GetAsString(i)
		st, _ := status.GetAsString(i)
		r, _ := rev.GetAsInt64(i)
		raw, _ := pl.GetAsString(i)
		var body payload
		if err := json.Unmarshal([]byte(raw), &body); err != nil {
			return nil, fmt.Errorf("milvus: decode entry %s: %w", e.ID, err)
		}
		e.Polarity, e.Status, e.Revision = protocol.Polarity(p), memory.Status(st), uint64(r)
		e.Tier = tier
		e.Text, e.Sessions, e.Hits, e.Helpful, e.Harmful = body.Text, body.Sessions, body.Hits, body.Helpful, body.Harmful
		e.Model, e.Source, e.SupersededBy, e.Mined = body.Model, body.Source, body.SupersededBy, body.Mined
		e.SessionCount = body.SessionCount
		e.Created, e.Updated, e.LastUsed = body.Created, body.Updated, body.LastUsed
		ts, _ := tools.ValueByIdx(i)
		for _, t := range ts {
			e.Tools = append(e.Tools, string(t))
		}
		e.Embedding = slices.Clone(vc.Data()[i])
	}
	return out, nil
}

// query returns every row of one collection matching ex, splitting by id prefix when a page
// reaches Milvus' result window.
func (s *Store) query(ctx context.Context, t protocol.Tier, ex, idPrefix string) ([]memory.Entry, error) {
	full := ex
	if idPrefix != "" {
		// A range, not LIKE: '_' is a LIKE wildcard and a legal id character. Every id character
		// sorts below '~', so the ids starting with p are exactly p <= id < p+"~".
		full = "(" + ex + `) && ` + fID + ` >= ` + quote(idPrefix) + ` && ` + fID + ` < ` + quote(idPrefix+"~")
	}
	rs, err := s.c.Query(ctx, s.coll(t), nil, full, outputFields,
		client.WithSearchQueryConsistencyLevel(entity.ClStrong), client.WithLimit(int64(queryWindow)))
	if err != nil {
		return nil, fmt.Errorf("milvus: query %s: %w", s.coll(t), err)
	}
	es, err := decodeRows(rs, t)
	if err != nil || len(es) < queryWindow {
		return es, err
	}
	if len(idPrefix) >= 8 {
		return nil, fmt.Errorf("milvus: query %s: more than %d entries share the id prefix %q", s.coll(t), queryWindow, idPrefix)
	}
	var all []memory.Entry
	for _, c := range idAlphabet {
		part, err := s.query(ctx, t, ex, idPrefix+string(c))
		if err != nil {
			return nil, err
		}
		all = append(all, part...)
	}
	return all, nil
}

const idAlphabet = "0123456789abcdefABCDEFghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ-_="

func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !strings.ContainsRune(idAlphabet, r) {
			return false
		}
	}
	return true
}

// current reads an entry from both tiers, taking the newest copy.
func (s *Store) current(ctx context.Context, id string) (memory.Entry, []protocol.Tier, error) {
	var best memory.Entry
	var where []protocol.Tier
	for _, t := range tiers {
		es, err := s.query(ctx, t, fID+" == "+quote(id), "")
		if err != nil {
			return memory.Entry{}, nil, err
		}
		for _, e := range es {
			where = append(where, t)
			if e.Revision > best.Revision {
				best = e
			}
		}
	}
	if len(where) == 0 {
		return memory.Entry{}, nil, fmt.Errorf("get memory entry %s: %w", id, memory.ErrNotFound)
	}
	return best, where, nil
}

// Get implements memory.Store.
func (s *Store) Get(ctx context.Context, id string) (memory.Entry, error) {
	if !validID(id) {
		return memory.Entry{}, fmt.Errorf("get memory entry %q: %w", id, memory.ErrNotFound)
	}
	e, _, err := s.current(ctx, id)
	return e, err
}

func (s *Store) check(e *memory.Entry) error {
	if !validID(e.ID) {
		return fmt.Errorf("put memory entry: id %q may hold only letters, digits, '-', '_' and '=' (at most 128)", e.ID)
	}
	if e.Model == "" {
		e.Model = s.model
	}
	if e.Model != s.model {
		return fmt.Errorf("put memory entry %s: vector from %q into a store of %q: %w", e.ID, e.Model, s.model, memory.ErrModelMismatch)
	}
	if len(e.Embedding) != s.dim {
		return fmt.Errorf("put memory entry %s: embedding has %d dimensions, the store holds %d", e.ID, len(e.Embedding), s.dim)
	}
	var n float32
	for _, x := range e.Embedding {
		n += x * x
	}
	if n == 0 {
		return fmt.Errorf("put memory entry %s: zero embedding", e.ID)
	}
	if e.Tier == "" {
		e.Tier = protocol.TierTactical
	}
	if e.Status == "" {
		e.Status = memory.StatusActive // as the KV store reads an empty status
	}
	if !slices.Contains(tiers, e.Tier) {
		return fmt.Errorf("put memory entry %s: unknown tier %q", e.ID, e.Tier)
	}
	if len(e.Tools) > maxTools {
		return fmt.Errorf("put memory entry %s: %d tools, at most %d", e.ID, len(e.Tools), maxTools)
	}
	for _, t := range e.Tools {
		if len(t) > maxToolLen {
			return fmt.Errorf("put memory entry %s: tool name longer than %d bytes", e.ID, maxToolLen)
		}
	}
	return nil
}

// nextRevision is above both the previous revision and the clock, so an entry deleted and
// created again never repeats a revision a stale writer may still hold.
func nextRevision(prev uint64) uint64 {
	return max(prev+1, uint64(time.Now().UnixNano()))
}

func (s *Store) upsert(ctx context.Context, t protocol.Tier, es []memory.Entry) error {
	n := len(es)
	ids, agents, pols, sts := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	revs, pls := make([]int64, n), make([]string, n)
	tools := make([][][]byte, n)
	vecs := make([][]float32, n)
	for i, e := range es {
		b, err := json.Marshal(payload{Text: e.Text, Sessions: e.Sessions, SessionCount: e.SessionCount, Hits: e.Hits, Helpful: e.Helpful, Harmful: e.Harmful,
			Model: e.Model, Source: e.Source, SupersededBy: e.SupersededBy, Mined: e.Mined,
			Created: e.Created, Updated: e.Updated, LastUsed: e.LastUsed, Tier: e.Tier})
		if err != nil {
			return fmt.Errorf("encode memory entry %s: %w", e.ID, err)
		}
		if len(b) > maxPayload {
			return fmt.Errorf("put memory entry %s: %d bytes of text and history, Milvus holds at most %d", e.ID, len(b), maxPayload)
		}
		ids[i], agents[i], pols[i], sts[i] = e.ID, e.Agent, string(e.Polarity), string(e.Status)
		revs[i], pls[i], vecs[i] = int64(e.Revision), string(b), e.Embedding
		tools[i] = make([][]byte, len(e.Tools))
		for j, tl := range e.Tools {
			tools[i][j] = []byte(tl)
		}
	}
	_, err := s.c.Upsert(ctx, s.coll(t), "",
		entity.NewColumnVarChar(fID, ids), entity.NewColumnVarChar(fAgent, agents),
		entity.NewColumnVarChar(fPolarity, pols), entity.NewColumnVarChar(fStatus, sts),
		entity.NewColumnVarCharArray(fTools, tools), entity.NewColumnInt64(fRevision, revs),
		entity.NewColumnVarChar(fPayload, pls), entity.NewColumnFloatVector(fVector, s.dim, vecs))
	if err != nil {
		return fmt.Errorf("milvus: upsert into %s: %w", s.coll(t), err)
	}
	return nil
}

// Put implements memory.Store (read-check-write under the store's lock).
func (s *Store) Put(ctx context.Context, e memory.Entry) (memory.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(&e); err != nil {
		return memory.Entry{}, err
	}
	cur, where, err := s.current(ctx, e.ID)
	found := err == nil
	if err != nil && !errors.Is(err, memory.ErrNotFound) {
		return memory.Entry{}, err
	}
	switch {
	case e.Revision == 0 && found:
		return memory.Entry{}, fmt.Errorf("create memory entry %s: it exists: %w", e.ID, memory.ErrConflict)
	case e.Revision != 0 && !found:
		return memory.Entry{}, fmt.Errorf("update memory entry %s: it does not exist: %w", e.ID, memory.ErrConflict)
	case e.Revision != 0 && cur.Revision != e.Revision:
		return memory.Entry{}, fmt.Errorf("update memory entry %s at revision %d (now %d): %w", e.ID, e.Revision, cur.Revision, memory.ErrConflict)
	}
	e.Revision = nextRevision(cur.Revision)
	if err := s.upsert(ctx, e.Tier, []memory.Entry{e}); err != nil {
		return memory.Entry{}, err
	}
	for _, t := range where {
		if t != e.Tier {
			if err := s.c.Delete(ctx, s.coll(t), "", fID+" == "+quote(e.ID)); err != nil {
				return memory.Entry{}, fmt.Errorf("milvus: move %s out of %s: %w", e.ID, s.coll(t), err)
			}
		}
	}
	return e, nil
}

// Delete implements memory.Store; deleting a missing entry is not an error.
func (s *Store) Delete(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tiers {
		if err := s.c.Delete(ctx, s.coll(t), "", fID+" == "+quote(id)); err != nil {
			return fmt.Errorf("milvus: delete %s from %s: %w", id, s.coll(t), err)
		}
	}
	return nil
}

// Search implements memory.Store: one search per tier collection, merged by score.
func (s *Store) Search(ctx context.Context, vec []float32, k int, f memory.Filter) ([]memory.Hit, error) {
	s.mu.Lock()
	dim := s.dim
	s.mu.Unlock()
	if len(vec) != dim {
		return nil, fmt.Errorf("search memory: query has %d dimensions, the store holds %d", len(vec), dim)
	}
	if k <= 0 {
		return nil, nil
	}
	var sp entity.SearchParam
	var err error
	if s.index == "FLAT" {
		sp, err = entity.NewIndexFlatSearchParam()
	} else {
		sp, err = entity.NewIndexHNSWSearchParam(max(k, 64))
	}
	if err != nil {
		return nil, err
	}
	ex := expr(f)
	var hits []memory.Hit
	for _, t := range s.tiersOf(f) {
		res, err := s.c.Search(ctx, s.coll(t), nil, ex, outputFields, []entity.Vector{entity.FloatVector(vec)},
			fVector, entity.COSINE, k, sp, client.WithSearchQueryConsistencyLevel(entity.ClStrong))
		if err != nil {
			return nil, fmt.Errorf("milvus: search %s: %w", s.coll(t), err)
		}
		for _, r := range res {
			if r.Err != nil {
				return nil, fmt.Errorf("milvus: search %s: %w", s.coll(t), r.Err)
			}
			rs := r.Fields
			if rs.GetColumn(fID) == nil && r.IDs != nil {
				rs = append(rs, r.IDs)
			}
			es, err := decodeRows(rs, t)
			if err != nil {
				return nil, err
			}
			for i, e := range es {
				hits = append(hits, memory.Hit{Entry: e, Score: float64(r.Scores[i])})
			}
		}
	}
	slices.SortStableFunc(hits, func(a, b memory.Hit) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return strings.Compare(a.Entry.ID, b.Entry.ID)
	})
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits, nil
}

// List implements memory.Store.
func (s *Store) List(ctx context.Context, f memory.Filter) ([]memory.Entry, error) {
	ex := expr(f)
	var out []memory.Entry
	for _, t := range s.tiersOf(f) {
		es, err := s.query(ctx, t, ex, "")
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	slices.SortFunc(out, func(a, b memory.Entry) int { return strings.Compare(a.ID, b.ID) })
	// A crash between the two halves of a promotion can leave two copies; keep the newest.
	out = slices.CompactFunc(out, func(a, b memory.Entry) bool { return a.ID == b.ID })
	return out, nil
}

// Reembed implements memory.Reembedder. Writers must be stopped while it runs: it rewrites the
// collections (recreating them when the dimension changes) without compare-and-set.
func (s *Store) Reembed(ctx context.Context, model string, dim int, embed func(context.Context, []string) ([][]float32, error)) (int, error) {
	if model == "" || dim <= 0 {
		return 0, errors.New("re-embed milvus memory: model and dimension are required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	byTier := map[protocol.Tier][]memory.Entry{}
	for _, t := range tiers {
		es, err := s.query(ctx, t, fID+` != ""`, "")
		if err != nil {
			return 0, err
		}
		byTier[t] = es
	}
	for _, t := range tiers {
		es := byTier[t]
		for start := 0; start < len(es); start += 64 {
			chunk := es[start:min(start+64, len(es))]
			texts := make([]string, len(chunk))
			for i, e := range chunk {
				texts[i] = e.Text
			}
			vecs, err := embed(ctx, texts)
			if err != nil {
				return 0, fmt.Errorf("re-embed milvus memory: %w", err)
			}
			if len(vecs) != len(chunk) {
				return 0, fmt.Errorf("re-embed milvus memory: %d vectors for %d texts", len(vecs), len(chunk))
			}
			for i := range chunk {
				if len(vecs[i]) != dim {
					return 0, fmt.Errorf("re-embed milvus memory: vector of %d dims, want %d", len(vecs[i]), dim)
				}
				chunk[i].Embedding, chunk[i].Model = vecs[i], model
				chunk[i].Revision = nextRevision(chunk[i].Revision)
			}
		}
	}
	if dim != s.dim {
		// The vector field's dimension is fixed at creation: rebuild both collections.
		for _, t := range tiers {
			if err := s.c.DropCollection(ctx, s.coll(t)); err != nil {
				return 0, fmt.Errorf("milvus: drop %s for re-embedding: %w", s.coll(t), err)
			}
			if err := s.ensureTier(ctx, t, dim); err != nil {
				return 0, err
			}
		}
	}
	s.dim = dim
	n := 0
	for _, t := range tiers {
		es := byTier[t]
		for start := 0; start < len(es); start += 256 {
			chunk := es[start:min(start+256, len(es))]
			if err := s.upsert(ctx, t, chunk); err != nil {
				return n, err
			}
			n += len(chunk)
		}
	}
	if err := s.writeMeta(ctx, model, dim); err != nil {
		return n, err
	}
	s.model = model
	return n, nil
}

// PutBatch writes new entries without the compare-and-set read, for bulk import and benchmarks;
// it refuses nothing that Put would accept but does not check for existing ids.
func (s *Store) PutBatch(ctx context.Context, es []memory.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	byTier := map[protocol.Tier][]memory.Entry{}
	for i := range es {
		e := es[i]
		if err := s.check(&e); err != nil {
			return err
		}
		e.Revision = nextRevision(0)
		byTier[e.Tier] = append(byTier[e.Tier], e)
	}
	for t, group := range byTier {
		if err := s.upsert(ctx, t, group); err != nil {
			return err
		}
	}
	return nil
}

// Flush seals what the server holds in memory into indexed segments (after a bulk import; a
// Milvus server also does this on its own schedule).
func (s *Store) Flush(ctx context.Context) error {
	for _, t := range tiers {
		if err := s.c.Flush(ctx, s.coll(t), false); err != nil {
			return fmt.Errorf("milvus: flush %s: %w", s.coll(t), err)
		}
	}
	return nil
}
