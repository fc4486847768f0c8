// Package memoryd is the memory service: it embeds, stores, ingests (dedup, promotion, conflict
// resolution, eviction) and retrieves guidelines, answering every memory operation as a NATS
// micro endpoint in one queue group, so more replicas share the load and agree through the
// store's compare-and-set.
package memoryd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// Version is reported in micro discovery.
const Version = "0.1.0"

// Deps are what memoryd runs on. Store, Embedder and Judge are optional: when nil, Run opens
// them from Config (tests and the all-in-one CLI may pass their own).
type Deps struct {
	Conn   *bus.Conn
	Names  protocol.Names
	Config *config.Config
	Logger *slog.Logger
	Home   string

	Store    memory.Store
	Embedder embed.Embedder
	Judge    ingest.Judge
	// GateJudge is the lesson gate's model check; nil means the model of miner.llm when one is
	// configured, else the gate's rules alone.
	GateJudge gate.Judge
	// Ready, when set, is closed once every endpoint is registered.
	Ready chan<- struct{}
}

// maxInFlight bounds concurrent handlers per replica: embedding is CPU bound.
const maxInFlight = 8

type server struct {
	d      Deps
	log    *slog.Logger
	store  memory.Store
	emb    embed.Embedder
	eng    *ingest.Engine
	gate   *gate.Gate
	tools  *catalogue
	ret    *retrieve.Retriever
	retOpt retrieve.Options
	exOpt  retrieve.ExampleOptions
	sem    chan struct{}
	wg     sync.WaitGroup

	mu sync.RWMutex
	// stale is set when the store holds another model's vectors: only migrate, list, get,
	// health and export work until `skein memory migrate` runs.
	stale string
}

// endpoint is one memoryd operation: a new, empty reply of its type, and the handler that fills
// it in. A handler returns its error rather than writing it: handler() writes it into the reply
// with its code, so every refusal carries the operation's own reply.
type endpoint struct {
	reply func() protocol.Failable
	serve func(ctx context.Context, data []byte, rep protocol.Failable) error
}

// op makes the endpoint of a handler whose reply is an *R.
func op[R any, PR interface {
	*R
	protocol.Failable
}](h func(ctx context.Context, data []byte, rep PR) error) endpoint {
	return endpoint{
		reply: func() protocol.Failable { return PR(new(R)) },
		serve: func(ctx context.Context, data []byte, rep protocol.Failable) error { return h(ctx, data, rep.(PR)) },
	}
}

// Run serves until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if d.Conn == nil {
		return errors.New("memoryd: no NATS connection")
	}
	if d.Config == nil {
		d.Config = config.Default()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{d: d, log: d.Logger, sem: make(chan struct{}, maxInFlight)}
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}()
	s.emb = d.Embedder
	if s.emb == nil {
		e, err := openEmbedder(ctx, d.Config.Memory)
		if err != nil {
			return fmt.Errorf("memoryd: %w", err)
		}
		s.emb = e
		closers = append(closers, e.Close)
	}
	s.store = d.Store
	if s.store == nil {
		st, stale, err := openStore(ctx, d, s.emb)
		if err != nil {
			return fmt.Errorf("memoryd: %w", err)
		}
		s.store, s.stale = st, stale
		closers = append(closers, st.Close)
		if r, ok := st.(interface{ Rebuilt() bool }); ok && r.Rebuilt() {
			s.log.Info("milvus collection predated entry kinds: rebuilt with a kind field and refilled from the records")
		}
		if stale != "" {
			s.log.Warn("memory store needs migration; retrieval and ingest are off until `skein memory migrate`", "detail", stale)
		}
	}
	opt := ingest.OptionsFrom(d.Config.Memory)
	opt.Logger = s.log
	opt.Judge = d.Judge
	gateJudge := d.GateJudge
	if (opt.Judge == nil || gateJudge == nil) && d.Config.Miner.LLM != nil {
		// Judging relations and lessons are small tasks; they use the miner's cheaper model only
		// when one is configured, never the agent's main model, and the rules when the model fails.
		err := llm.CheckKey(*d.Config.Miner.LLM)
		var m llm.Backend
		if err == nil {
			m, err = newModel(*d.Config.Miner.LLM, s.log)
		}
		if err != nil {
			s.log.Warn("no model judge for promotions and the lesson gate; using the deterministic rules", "err", err)
		} else {
			if opt.Judge == nil {
				opt.Judge = ingest.ModelJudge{Backend: m, Model: d.Config.Miner.LLM.Model}
			}
			if gateJudge == nil {
				gateJudge = gate.ModelJudge{Backend: m, Model: d.Config.Miner.LLM.Model}
			}
			opt.Skills.Writer = skillWriter(m, d.Config.Miner.LLM.Model, s.log)
		}
	}
	if gateJudge == nil {
		s.log.Info("lesson gate: no model judge (set miner.llm to have one); the normalised rules alone decide what enters memory")
	}
	s.gate = gate.New(gateJudge, s.log, 0)
	s.tools = &catalogue{conn: d.Conn, mesh: d.Names, log: s.log}
	opt.Gate, opt.KnownTools = s.gate, s.tools.toolNames
	// The tokenizer's vocabulary loads on first use (about a second); load it now so the first
	// retrieval does not pay for it.
	go tokenize.Count("warm up")
	s.eng = ingest.New(s.store, s.emb, opt)
	s.retOpt = retrieve.OptionsFrom(d.Config.Memory)
	s.exOpt = retrieve.ExampleOptionsFrom(d.Config.Memory)
	s.ret = retrieve.New(s.store, s.emb, s.retOpt)

	svc, err := micro.AddService(d.Conn.NC, micro.Config{
		Name: protocol.ServiceMemoryd, Version: Version, QueueGroup: protocol.QueueMemoryd,
		Description: "skein memory: retrieval, ingest, promotion, eviction",
	})
	if err != nil {
		return fmt.Errorf("memoryd: add micro service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	for name, e := range s.endpoints() {
		if err := svc.AddEndpoint(name, s.handler(ctx, name, e), micro.WithEndpointSubject(d.Names.Memory(name))); err != nil {
			return fmt.Errorf("memoryd: endpoint %s: %w", name, err)
		}
	}
	// Ready means callers reach every endpoint: the server has the subscriptions (a request
	// from another connection may otherwise still find no responder).
	if err := d.Conn.NC.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("memoryd: register endpoints with the server: %w", err)
	}
	if d.Ready != nil {
		close(d.Ready)
	}
	s.log.Info("memoryd serving", "model", s.emb.Model(), "store", storeKind(d.Config.Memory))
	if _, ok := s.store.(memory.Repairer); ok && s.staleErr() == nil {
		// A collection may hold rows this mesh has no record of, or lack rows of its records
		// (another mesh's collection under the same name, a writer that died between the two
		// writes): reconcile once, while serving, and say what was found.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.reconcile(ctx)
		}()
	}
	s.evictLoop(ctx)
	_ = svc.Stop()
	s.wg.Wait()
	return nil
}

func storeKind(m config.Memory) string {
	if m.Store == "" {
		return "kv"
	}
	return m.Store
}

// endpoints are memoryd's operations by name.
func (s *server) endpoints() map[string]endpoint {
	return map[string]endpoint{
		protocol.MemRetrieve: op(s.retrieve), protocol.MemIngest: op(s.ingest), protocol.MemFeedback: op(s.feedback),
		protocol.MemInspect: op(s.inspect), protocol.MemList: op(s.list), protocol.MemGet: op(s.get),
		protocol.MemImport: op(s.importEntries), protocol.MemEvict: op(s.evict), protocol.MemMigrate: op(s.migrate),
		protocol.MemRetire: op(s.retire), protocol.MemRemember: op(s.remember), protocol.MemRepair: op(s.repair),
		protocol.MemHealth: op(s.health), protocol.MemEmbed: op(s.embed),
	}
}

// handler runs e off the subscription goroutine (bounded) and answers with its reply, which
// carries the handler's error, if any, with its code (bus.Respond sets the service error headers
// from it).
func (s *server) handler(ctx context.Context, name string, e endpoint) micro.HandlerFunc {
	return func(req micro.Request) {
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			rep := e.reply()
			rep.Fail(protocol.Errorf(protocol.CodeUnavailable, "memoryd is shutting down; ask again"))
			bus.Respond(req, protocol.ContentTypeMsgpack, rep)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			rep := e.reply()
			if err := e.serve(rctx, req.Data(), rep); err != nil {
				rep.Fail(bus.Coded(err))
				s.logRefusal(name, err)
			}
			bus.RespondAsync(req, protocol.ContentTypeMsgpack, rep)
		}()
	}
}

// logRefusal logs a failed request: a warning for what an operator should look at (a bug, a
// client sending what it should not), a debug line for the rest (an unknown entry, a stale store
// the health check already reports).
func (s *server) logRefusal(name string, err error) {
	switch c := bus.Classify(err); c {
	case protocol.CodeInternal, protocol.CodeBadRequest, protocol.CodeTooLarge:
		s.log.Warn("memoryd request failed", "op", name, "code", c, "err", err)
	default:
		s.log.Debug("memoryd request refused", "op", name, "code", c, "err", err)
	}
}

// decode reads a request and checks its ids: each may become a key of the store, and one
// longer than the server accepts would cost memoryd its connection.
func decode(data []byte, m protocol.Message) error { return protocol.UnmarshalChecked(data, m) }

// staleErr is the refusal of what needs the store's vectors while they are another model's.
func (s *server) staleErr() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.stale == "" {
		return nil
	}
	return protocol.Errorf(protocol.CodeUnavailable, "%s; run `skein memory migrate` to re-embed it with %s", s.stale, s.emb.Model())
}

func (s *server) retrieve(ctx context.Context, data []byte, rep *protocol.RetrieveReply) error {
	rep.Guidelines = []protocol.Guideline{}
	var req protocol.RetrieveRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	if err := s.staleErr(); err != nil {
		return err
	}
	// An empty store answers at once, without embedding the task.
	if l, ok := s.store.(interface{ Len() int }); ok && l.Len() == 0 {
		return nil
	}
	ans, err := s.ret.Answer(ctx, req, s.exOpt)
	if err != nil {
		return err
	}
	*rep = *ans
	if rep.Guidelines == nil {
		rep.Guidelines = []protocol.Guideline{}
	}
	return nil
}

func (s *server) ingest(ctx context.Context, data []byte, rep *protocol.IngestReply) error {
	var req protocol.IngestRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	if err := s.staleErr(); err != nil {
		return err
	}
	acts, err := s.eng.Ingest(ctx, req)
	rep.Actions = acts
	for _, a := range acts {
		s.log.Info("ingest", "agent", req.Agent, "session", req.SessionID, "key", a.Key, "entry", a.EntryID, "action", a.Action, "detail", a.Detail)
	}
	return err
}

func (s *server) feedback(ctx context.Context, data []byte, rep *protocol.Ack) error {
	var req protocol.FeedbackRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	if _, err := s.eng.Feedback(ctx, req); err != nil {
		return err
	}
	rep.OK = true
	return nil
}

func strip(e memory.Entry) memory.Entry {
	e.Embedding = nil
	return e
}

func (s *server) inspect(ctx context.Context, data []byte, rep *protocol.MemoryInspectReply) error {
	rep.Model, rep.At, rep.Counts = s.emb.Model(), time.Now().UTC(), []protocol.MemoryCount{}
	var req protocol.MemoryInspectRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	if len(req.Query) > protocol.MaxQueryBytes {
		return protocol.Errorf(protocol.CodeTooLarge, "query is %d bytes long; at most %d", len(req.Query), protocol.MaxQueryBytes)
	}
	kind := req.Kind
	if kind == "" {
		kind = memory.KindAny
	}
	all, err := s.store.List(ctx, memory.Filter{Agent: req.Agent, Kind: memory.KindAny, Status: memory.StatusAny})
	if err != nil {
		return err
	}
	counts := map[protocol.MemoryCount]int{}
	for _, e := range all {
		counts[protocol.MemoryCount{Agent: e.Agent, Kind: e.Kind, Tier: e.Tier, Status: e.Status}]++
	}
	for c, n := range counts {
		c.N = n
		rep.Counts = append(rep.Counts, c)
	}
	sort.Slice(rep.Counts, func(i, j int) bool {
		a, b := rep.Counts[i], rep.Counts[j]
		if a.Agent != b.Agent {
			return a.Agent < b.Agent
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Tier != b.Tier {
			return a.Tier < b.Tier
		}
		return a.Status < b.Status
	})
	k := req.TopK
	if k <= 0 {
		k = 10
	}
	if req.Query == "" {
		// Without a query, the most used entries are the interesting ones.
		var sel []memory.Entry
		f := memory.Filter{Kind: kind}
		for _, e := range all {
			if e.Status == memory.StatusActive && (req.Tier == "" || e.Tier == req.Tier) && f.MatchKind(e.KindOf()) {
				sel = append(sel, e)
			}
		}
		sort.SliceStable(sel, func(i, j int) bool {
			if (sel[i].Tier == protocol.TierStrategic) != (sel[j].Tier == protocol.TierStrategic) {
				return sel[i].Tier == protocol.TierStrategic
			}
			if sel[i].DistinctSessions() != sel[j].DistinctSessions() {
				return sel[i].DistinctSessions() > sel[j].DistinctSessions()
			}
			return sel[i].ID < sel[j].ID
		})
		for _, e := range sel[:min(k, len(sel))] {
			rep.Hits = append(rep.Hits, protocol.MemoryScored{Entry: strip(e)})
		}
		return nil
	}
	if err := s.staleErr(); err != nil {
		return err
	}
	vecs, err := s.emb.Embed(ctx, []string{req.Query})
	if err != nil {
		return fmt.Errorf("embed query: %w", err)
	}
	// Ranked as retrieval ranks (similarity nudged by feedback) over the same candidate pool
	// retrieval searches, so what is listed first is what a task like the query would see first.
	hits, err := s.store.Search(ctx, vecs[0], k*4, memory.Filter{Agent: req.Agent, Kind: kind, Tier: req.Tier})
	if err != nil {
		return err
	}
	var tools []string
	for _, h := range hits {
		tools = append(tools, h.Entry.Tools...)
	}
	named := retrieve.NamedTools(req.Query, tools)
	for _, h := range hits {
		rep.Hits = append(rep.Hits, protocol.MemoryScored{Entry: strip(h.Entry), Score: retrieve.Rank(h.Score, h.Entry),
			Similarity: h.Score, Why: retrieve.WhyAny(h.Entry, h.Score, named, s.retOpt, s.exOpt)})
	}
	sort.SliceStable(rep.Hits, func(i, j int) bool {
		if rep.Hits[i].Score != rep.Hits[j].Score {
			return rep.Hits[i].Score > rep.Hits[j].Score
		}
		return rep.Hits[i].Entry.ID < rep.Hits[j].Entry.ID
	})
	rep.Hits = rep.Hits[:min(k, len(rep.Hits))]
	return nil
}

func (s *server) list(ctx context.Context, data []byte, rep *protocol.MemoryListReply) error {
	var req protocol.MemoryListRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	all, err := s.store.List(ctx, memory.Filter{Agent: req.Agent, Kind: req.Kind, Tier: req.Tier, Status: req.Status})
	if err != nil {
		return err
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Agent != b.Agent {
			return a.Agent < b.Agent
		}
		if a.Tier != b.Tier {
			return a.Tier == protocol.TierStrategic
		}
		return a.ID < b.ID
	})
	limit := req.Limit
	if limit <= 0 || limit > 500 {
		limit = 500 // keeps a reply well under the NATS payload limit
	}
	off := min(max(req.Offset, 0), len(all))
	page := all[off:min(off+limit, len(all))]
	rep.Total, rep.Entries = len(all), make([]memory.Entry, 0, len(page))
	for _, e := range page {
		rep.Entries = append(rep.Entries, strip(e))
	}
	return nil
}

func (s *server) get(ctx context.Context, data []byte, rep *protocol.MemoryGetReply) error {
	var req protocol.MemoryGetRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	e, err := s.store.Get(ctx, req.ID)
	if err != nil {
		return err
	}
	e = strip(e)
	rep.Entry = &e
	return nil
}

func (s *server) importEntries(ctx context.Context, data []byte, rep *protocol.MemoryImportReply) error {
	var req protocol.MemoryImportRequest
	// Each entry's ids are checked on their own (checkImport), so one bad entry is reported
	// and skipped rather than refusing the whole file.
	if err := protocol.Unmarshal(data, &req); err != nil {
		return protocol.Wrap(protocol.CodeBadRequest, err)
	}
	if err := s.staleErr(); err != nil {
		return err
	}
	for i, e := range req.Entries {
		ok, err := s.importOne(ctx, e, req.Replace)
		switch {
		case err != nil:
			rep.Skipped++
			rep.Problems = append(rep.Problems, fmt.Sprintf("entry %d (%s): %v", i+1, e.ID, err))
		case ok:
			rep.Imported++
		default:
			rep.Skipped++
		}
	}
	return nil
}

func (s *server) importOne(ctx context.Context, e memory.Entry, replace bool) (bool, error) {
	now := time.Now().UTC()
	if err := checkImport(&e, now); err != nil {
		return false, err
	}
	// An import is text from outside like any other: the lesson gate decides what it may be.
	d := s.gate.Check(ctx, gate.Lesson{Kind: e.KindOf(), Text: memory.ShownText(e), Source: gate.SourceImported, Agent: e.Agent, Tools: e.Tools})
	switch d.Verdict {
	case gate.Reject:
		return false, fmt.Errorf("lesson gate: %s", d.Reason())
	case gate.Quarantine:
		e.Status, e.SupersededBy = memory.StatusQuarantined, ""
		e.History = append(e.History, protocol.MemoryChange{At: now, Event: protocol.ChangeQuarantined, Reason: "lesson gate at import: " + d.Reason()})
	}
	if e.KindOf() == memory.KindGuideline {
		e.Text = d.Text
	} else {
		// The gate read every text of the body; each is stored as it normalises text.
		e.Text = gate.Normalize(e.Text)
		if e.Case != nil {
			c := *e.Case
			ingest.CleanCase(&c)
			e.Case, e.Text = &c, c.Intent
		}
	}
	if e.ID == "" {
		e.ID = memory.EntryID(e.Agent, e.Polarity, e.Text)
		if k := e.KindOf(); k != memory.KindGuideline {
			e.ID = k[:1] + e.ID
		}
	}
	// Vectors never travel in exports: every entry is embedded with this memoryd's model.
	vecs, err := s.emb.Embed(ctx, []string{e.Text})
	if err != nil {
		return false, fmt.Errorf("embed: %w", err)
	}
	e.Embedding, e.Model, e.Revision = vecs[0], s.emb.Model(), 0
	cur, err := s.store.Get(ctx, e.ID)
	switch {
	case errors.Is(err, memory.ErrNotFound):
	case err != nil:
		return false, err
	case !replace:
		return false, nil
	default:
		e.Revision = cur.Revision
	}
	if _, err := s.store.Put(ctx, e); err != nil {
		return false, err
	}
	return true, nil
}

func (s *server) evict(ctx context.Context, data []byte, rep *protocol.MemoryEvictReply) error {
	var req protocol.MemoryEvictRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	ev, err := s.eng.Evict(ctx, req.Agent, req.DryRun)
	rep.Evicted, rep.DryRun, rep.Capacity = ev, req.DryRun, s.eng.Options().Capacity
	if rep.Evicted == nil {
		rep.Evicted = []ingest.Eviction{}
	}
	return err
}

// retire takes one entry out of retrieval at an operator's request: retired in place, or deleted.
func (s *server) retire(ctx context.Context, data []byte, rep *protocol.MemoryRetireReply) error {
	var req protocol.MemoryRetireRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	rep.ID = req.ID
	e, err := s.store.Get(ctx, req.ID)
	if err != nil {
		return err
	}
	if req.Evict {
		if err := s.store.Delete(ctx, req.ID); err != nil && !errors.Is(err, memory.ErrNotFound) {
			return err
		}
		rep.Evicted = true
		s.log.Info("memory entry evicted", "entry", req.ID, "agent", e.Agent, "by", req.By, "reason", req.Reason)
		return nil
	}
	if e.Status != memory.StatusRetired {
		e.Status, e.Updated = memory.StatusRetired, time.Now().UTC()
		if _, err := s.store.Put(ctx, e); err != nil {
			return err
		}
		s.log.Info("memory entry retired", "entry", req.ID, "agent", e.Agent, "by", req.By, "reason", req.Reason)
	}
	rep.Status = memory.StatusRetired
	return nil
}

func (s *server) migrate(ctx context.Context, _ []byte, rep *protocol.MemoryMigrateReply) error {
	from := s.store.Model()
	n, err := memory.Migrate(ctx, s.store, s.emb)
	rep.Reembedded, rep.From, rep.Model = n, from, s.emb.Model()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.stale = ""
	s.mu.Unlock()
	s.log.Info("memory migrated", "from", from, "to", s.emb.Model(), "entries", n)
	return nil
}

// reconcile repairs the store at start and says in one line what it found.
func (s *server) reconcile(ctx context.Context) {
	r := s.store.(memory.Repairer)
	start := time.Now()
	rep, err := r.Repair(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil:
		s.log.Warn("memory store not reconciled with its records: searches may list rows without a record until `skein memory repair` succeeds",
			"err", err)
	case rep.Changed() > 0:
		s.log.Warn("memory store reconciled with its records", "found", rep.String(), "took", time.Since(start).Round(time.Millisecond))
	default:
		s.log.Info("memory store reconciled with its records", "found", rep.String(), "took", time.Since(start).Round(time.Millisecond))
	}
}

// repair makes the store's search index hold exactly the store's records (memory.Repairer); a
// store without a separate index (kv: rebuilt from its bucket on every start) has nothing to do.
func (s *server) repair(ctx context.Context, _ []byte, rep *protocol.MemoryRepairReply) error {
	rep.Store = storeKind(s.d.Config.Memory)
	if err := s.staleErr(); err != nil {
		return err
	}
	r, ok := s.store.(memory.Repairer)
	if !ok {
		return nil
	}
	found, err := r.Repair(ctx)
	rep.Repaired = err == nil
	rep.Records, rep.Rows, rep.Missing, rep.Stale, rep.Orphans = found.Records, found.Rows, found.Missing, found.Stale, found.Orphans
	if err != nil {
		return err
	}
	s.log.Info("memory store repaired", "found", found.String())
	return nil
}

// health says whether memoryd serves: OK false, with the reason as the reply's error, while the
// store needs a migration or cannot be read.
func (s *server) health(ctx context.Context, _ []byte, rep *protocol.MemoryHealthReply) error {
	rep.OK, rep.Store, rep.Model, rep.Dim = true, storeKind(s.d.Config.Memory), s.emb.Model(), s.emb.Dim()
	rep.Storage = s.d.Conn.Storage(ctx, s.d.Names, false).State
	var err error
	if l, ok := s.store.(interface{ Len() int }); ok {
		rep.Entries = l.Len()
	} else if all, lerr := s.store.List(ctx, memory.Filter{Kind: memory.KindAny, Status: memory.StatusAny}); lerr == nil {
		rep.Entries = len(all)
	} else {
		err = lerr
	}
	if serr := s.staleErr(); serr != nil {
		err = serr
	}
	rep.OK = err == nil
	return err
}

func (s *server) embed(ctx context.Context, data []byte, rep *protocol.MemoryEmbedReply) error {
	rep.Model = s.emb.Model()
	var req protocol.MemoryEmbedRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	vecs, err := s.emb.Embed(ctx, req.Texts)
	if err != nil {
		return err
	}
	rep.Vectors = vecs
	return nil
}

// evictLoop applies the capacity policy every memory.evict_every until ctx ends. Replicas may
// run it at once: eviction is deterministic and a second delete of the same id is a no-op.
func (s *server) evictLoop(ctx context.Context) {
	every, err := time.ParseDuration(s.d.Config.Memory.EvictEvery)
	if err != nil || every <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ev, err := s.eng.Evict(ctx, "", false)
			if err != nil {
				s.log.Warn("scheduled eviction", "err", err)
			} else if len(ev) > 0 {
				s.log.Info("scheduled eviction", "evicted", len(ev))
			}
		}
	}
}
