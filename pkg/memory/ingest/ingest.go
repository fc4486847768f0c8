// Package ingest applies the memory rules to mined candidates over any memory.Store:
// near-duplicate merging by cosine within one polarity, idempotence per (session, candidate
// key), in-place promotion after enough distinct sessions, a relation check against the
// agent's strategic entries before promotion (duplicate, refinement, contradiction,
// independent), supersession instead of deletion, feedback counters, and capacity eviction.
//
// Contradictions before promotion are settled by evidence: distinct sessions plus helpful minus
// harmful marks. The loser is marked superseded with a pointer to the winner, never deleted. A
// model judge may instead return a reconciled guideline, which replaces the candidate's text in
// place and supersedes the old entry. A tie promotes nothing: the candidate stays an active
// tactical entry and is judged again when its next session arrives.
//
// Every read-modify-write goes through the store's compare-and-set and is retried with backoff
// on memory.ErrConflict, so several memoryd replicas may ingest at once.
//
// Promotion writes the other entries it changes (a superseded strategic entry) before the
// promoted one. If the last write loses a race, the retry re-reads everything: the superseded
// entry is no longer active, so the retry sees a consistent state and never leaves two active
// strategic entries that contradict each other.
package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Defaults of the memory section.
const (
	DefaultSimilarityThreshold = 0.85
	DefaultPromotionSessions   = 3
	DefaultCapacity            = 2000
	DefaultRelatedFloor        = 0.60
	DefaultDuplicateFloor      = 0.92
)

// Actions reported per candidate.
const (
	ActAdded      = "added"
	ActMerged     = "merged"
	ActPromoted   = "promoted"
	ActAbsorbed   = "absorbed"   // folded into an existing strategic duplicate
	ActSuperseded = "superseded" // lost a contradiction to an existing strategic entry
	ActSkipped    = "skipped"    // already counted for this (session, key)
	ActDeferred   = "deferred"   // would promote, but contradicts a strategic entry with equal evidence
)

// Options are the ingest rules' parameters.
type Options struct {
	SimilarityThreshold float64
	PromotionSessions   int
	// Capacity bounds the entries of one agent in one tier.
	Capacity int
	// RelatedFloor: strategic entries at least this similar are judged before a promotion.
	RelatedFloor float64
	// DuplicateFloor is the rule judge's duplicate band.
	DuplicateFloor float64
	// Judge classifies relations before promotion; nil means RuleJudge.
	Judge  Judge
	Now    func() time.Time
	Logger *slog.Logger
	// MaxElapsed bounds the conflict retry loop of one operation.
	MaxElapsed time.Duration
}

// OptionsFrom reads the memory section, filling defaults for zero values.
func OptionsFrom(m config.Memory) Options {
	return Options{
		SimilarityThreshold: m.SimilarityThreshold,
		PromotionSessions:   m.PromotionSessions,
		Capacity:            m.Capacity,
	}.withDefaults()
}

func (o Options) withDefaults() Options {
	if o.SimilarityThreshold <= 0 {
		o.SimilarityThreshold = DefaultSimilarityThreshold
	}
	if o.PromotionSessions <= 0 {
		o.PromotionSessions = DefaultPromotionSessions
	}
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.RelatedFloor <= 0 {
		o.RelatedFloor = DefaultRelatedFloor
	}
	if o.DuplicateFloor <= 0 {
		o.DuplicateFloor = max(DefaultDuplicateFloor, o.SimilarityThreshold)
	}
	if o.Judge == nil {
		o.Judge = RuleJudge{DuplicateFloor: o.DuplicateFloor}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxElapsed <= 0 {
		o.MaxElapsed = 30 * time.Second
	}
	return o
}

// Engine applies the rules to one store.
type Engine struct {
	store memory.Store
	emb   embed.Embedder
	opt   Options
}

// New returns an engine over store, embedding with emb.
func New(store memory.Store, emb embed.Embedder, opt Options) *Engine {
	return &Engine{store: store, emb: emb, opt: opt.withDefaults()}
}

// Options returns the effective options.
func (e *Engine) Options() Options { return e.opt }

// Ingest applies every candidate of one session. A failing candidate is reported in its
// action and does not stop the others; the error is the first failure.
func (e *Engine) Ingest(ctx context.Context, req protocol.IngestRequest) ([]protocol.IngestAction, error) {
	if err := protocol.IDAgent.Check(req.Agent); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	if req.SessionID == "" {
		return nil, errors.New("ingest: session id is empty")
	}
	var first error
	acts := make([]protocol.IngestAction, 0, len(req.Candidates))
	for _, c := range req.Candidates {
		a, err := e.IngestOne(ctx, req.Agent, req.SessionID, c)
		if err != nil {
			a = protocol.IngestAction{Key: c.Key, Action: "error", Detail: err.Error()}
			if first == nil {
				first = err
			}
		}
		acts = append(acts, a)
	}
	return acts, first
}

// CandidateKey returns c.Key, or a key derived from the text when the miner sent none.
func CandidateKey(c protocol.Candidate) string {
	if c.Key != "" {
		return c.Key
	}
	h := sha256.Sum256([]byte(string(c.Polarity) + "\x00" + memory.Normalize(c.Text)))
	return "text:" + hex.EncodeToString(h[:8])
}

func minedMarker(session, key string) string { return session + "/" + key }

// IngestOne applies one candidate from one session.
func (e *Engine) IngestOne(ctx context.Context, agent, session string, c protocol.Candidate) (protocol.IngestAction, error) {
	c.Text = strings.TrimSpace(c.Text)
	key := CandidateKey(c)
	if c.Text == "" {
		return protocol.IngestAction{Key: key, Action: ActSkipped, Detail: "empty text"}, nil
	}
	if c.Polarity != protocol.PolarityAvoid && c.Polarity != protocol.PolarityPattern {
		return protocol.IngestAction{}, fmt.Errorf("ingest %s: unknown polarity %q", key, c.Polarity)
	}
	vecs, err := e.emb.Embed(ctx, []string{c.Text})
	if err != nil {
		return protocol.IngestAction{}, fmt.Errorf("ingest %s: embed: %w", key, err)
	}
	var act protocol.IngestAction
	err = e.retry(ctx, func() error {
		var err error
		act, err = e.ingestOnce(ctx, agent, session, key, c, vecs[0])
		return err
	})
	if err != nil {
		return protocol.IngestAction{}, fmt.Errorf("ingest %s: %w", key, err)
	}
	return act, nil
}

// retry runs op again while it loses compare-and-set races.
func (e *Engine) retry(ctx context.Context, op func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 5 * time.Millisecond
	b.MaxInterval = 250 * time.Millisecond
	b.MaxElapsedTime = e.opt.MaxElapsed
	return backoff.Retry(func() error {
		err := op()
		if err == nil || errors.Is(err, memory.ErrConflict) {
			return err
		}
		return backoff.Permanent(err)
	}, backoff.WithContext(b, ctx))
}

func (e *Engine) ingestOnce(ctx context.Context, agent, session, key string, c protocol.Candidate, vec []float32) (protocol.IngestAction, error) {
	marker := minedMarker(session, key)
	id := memory.EntryID(agent, c.Polarity, c.Text)
	var target *memory.Entry
	ent, err := e.store.Get(ctx, id)
	switch {
	case err == nil:
		target = &ent
	case !errors.Is(err, memory.ErrNotFound):
		return protocol.IngestAction{}, fmt.Errorf("get %s: %w", id, err)
	}
	if target == nil {
		// Only the same polarity is ever a merge target: a failure must never be absorbed into
		// a success pattern (the failure signal would be lost), nor the reverse.
		hits, err := e.store.Search(ctx, vec, 4, memory.Filter{Agent: agent, Polarity: c.Polarity})
		if err != nil {
			return protocol.IngestAction{}, fmt.Errorf("search: %w", err)
		}
		for _, h := range hits {
			if h.Score < e.opt.SimilarityThreshold || h.Entry.Polarity != c.Polarity {
				continue
			}
			// Sentence embeddings barely see negation ("always pass --header" and "never pass
			// --header" score 0.97 with MiniLM), so opposite advice is never merged: it stays a
			// separate entry and the conflict is settled by evidence at promotion.
			if v, _ := (RuleJudge{}).Judge(ctx, memory.Entry{Text: c.Text, Polarity: c.Polarity}, h.Entry, h.Score); v.Relation == Contradiction {
				continue
			}
			// A hit may lack its vector and trail a concurrent write; change the stored entry.
			t, err := e.store.Get(ctx, h.Entry.ID)
			if errors.Is(err, memory.ErrNotFound) {
				continue
			}
			if err != nil {
				return protocol.IngestAction{}, fmt.Errorf("get %s: %w", h.Entry.ID, err)
			}
			target = &t
			break
		}
	}
	now := e.opt.Now().UTC()
	var act protocol.IngestAction
	if target != nil {
		ent = *target
		if slices.Contains(ent.Mined, marker) {
			return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActSkipped, Detail: "already counted for this session"}, nil
		}
		if !slices.Contains(ent.Sessions, session) {
			ent.SessionCount = ent.DistinctSessions() + 1
			ent.Sessions = append(ent.Sessions, session)
		}
		ent.Hits++
		ent.Tools = union(ent.Tools, c.Tools)
		ent.Mined = append(ent.Mined, marker)
		ent.Updated = now
		bound(&ent)
		act = protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActMerged,
			Detail: fmt.Sprintf("%d distinct sessions now; promotion to strategic at %d", ent.DistinctSessions(), e.opt.PromotionSessions)}
		if ent.Status != memory.StatusActive {
			act.Detail += fmt.Sprintf(" (entry is %s by %s)", ent.Status, ent.SupersededBy)
		}
	} else {
		src := c.Source
		if src == "" {
			src = memory.SourceMiner
		}
		ent = memory.Entry{
			ID: id, Agent: agent, Text: c.Text, Polarity: c.Polarity, Tier: protocol.TierTactical,
			Tools: union(nil, c.Tools), Sessions: []string{session}, SessionCount: 1, Hits: 1,
			Model: e.emb.Model(), Embedding: vec, Source: src, Status: memory.StatusActive,
			Mined: []string{marker}, Created: now, Updated: now,
		}
		if src == memory.SourceSubagent || src == memory.SourceRemembered {
			ent.SourceAgent, ent.SourceSession = c.SourceAgent, session
		}
		act = protocol.IngestAction{Key: key, EntryID: id, Action: ActAdded,
			Detail: fmt.Sprintf("new lesson: no %s entry of this agent within similarity %.2f", c.Polarity, e.opt.SimilarityThreshold)}
	}
	if ent.Status == memory.StatusActive && ent.Tier == protocol.TierTactical && ent.DistinctSessions() >= e.opt.PromotionSessions {
		return e.promote(ctx, ent, key)
	}
	if _, err := e.store.Put(ctx, ent); err != nil {
		return protocol.IngestAction{}, fmt.Errorf("put %s: %w", ent.ID, err)
	}
	return act, nil
}

// evidence is what decides a contradiction: how many distinct sessions saw the lesson, and how
// the entry fared when it was used.
func evidence(e memory.Entry) int { return e.DistinctSessions() + e.Helpful - e.Harmful }

// promote checks ent against the agent's similar strategic entries, resolves what it finds and
// changes ent's tier in place.
func (e *Engine) promote(ctx context.Context, ent memory.Entry, key string) (protocol.IngestAction, error) {
	now := e.opt.Now().UTC()
	hits, err := e.store.Search(ctx, ent.Embedding, 8, memory.Filter{Agent: ent.Agent, Tier: protocol.TierStrategic})
	if err != nil {
		return protocol.IngestAction{}, fmt.Errorf("search strategic: %w", err)
	}
	var writes []memory.Entry
	var notes []string
	for _, h := range hits {
		if h.Entry.ID == ent.ID || h.Score < e.opt.RelatedFloor {
			continue
		}
		old, err := e.store.Get(ctx, h.Entry.ID) // the hit may lack its vector or trail a write
		if errors.Is(err, memory.ErrNotFound) {
			continue
		}
		if err != nil {
			return protocol.IngestAction{}, fmt.Errorf("get strategic %s: %w", h.Entry.ID, err)
		}
		if old.Status != memory.StatusActive || old.Tier != protocol.TierStrategic {
			continue // changed since the search saw it
		}
		v, err := e.opt.Judge.Judge(ctx, ent, old, h.Score)
		if err != nil {
			return protocol.IngestAction{}, fmt.Errorf("judge %s against %s: %w", ent.ID, old.ID, err)
		}
		e.opt.Logger.Debug("promotion check", "candidate", ent.ID, "strategic", old.ID, "relation", v.Relation, "reason", v.Reason)
		switch v.Relation {
		case Duplicate:
			if old.Polarity != ent.Polarity {
				continue
			}
			// The strategic entry already says this: it takes the evidence, the candidate
			// points at it. Nothing is deleted.
			mergeSessions(&old, ent)
			old.Hits += ent.Hits
			old.Helpful += ent.Helpful
			old.Harmful += ent.Harmful
			old.Tools = union(old.Tools, ent.Tools)
			old.Mined = union(old.Mined, ent.Mined)
			old.Updated = now
			bound(&old)
			ent.Status, ent.SupersededBy, ent.Updated = memory.StatusSuperseded, old.ID, now
			if err := e.putAll(ctx, append(writes, old, ent)); err != nil {
				return protocol.IngestAction{}, err
			}
			return protocol.IngestAction{Key: key, EntryID: old.ID, Action: ActAbsorbed,
				Detail: fmt.Sprintf("%s duplicates strategic %s (%s)", ent.ID, old.ID, v.Reason)}, nil
		case Refinement:
			if old.Polarity != ent.Polarity {
				continue
			}
			inherit(&ent, old)
			old.Status, old.SupersededBy, old.Updated = memory.StatusSuperseded, ent.ID, now
			writes = append(writes, old)
			notes = append(notes, "refines "+old.ID)
		case Contradiction:
			if v.Reconciled != "" {
				vecs, err := e.emb.Embed(ctx, []string{v.Reconciled})
				if err != nil {
					return protocol.IngestAction{}, fmt.Errorf("embed reconciled guideline: %w", err)
				}
				ent.Text, ent.Embedding, ent.Model = v.Reconciled, vecs[0], e.emb.Model()
				inherit(&ent, old)
				old.Status, old.SupersededBy, old.Updated = memory.StatusSuperseded, ent.ID, now
				writes = append(writes, old)
				notes = append(notes, "reconciled with "+old.ID)
				continue
			}
			// A tie settles nothing: the candidate stays an active tactical entry (still
			// retrieved with tasks) and is judged again when its next session arrives. The old
			// wording never wins by default, and neither side is lost.
			if evidence(ent) == evidence(old) {
				if _, err := e.store.Put(ctx, ent); err != nil {
					return protocol.IngestAction{}, fmt.Errorf("put %s: %w", ent.ID, err)
				}
				return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActDeferred,
					Detail: fmt.Sprintf("contradicts strategic %s with equal evidence (%d); promotion waits for more", old.ID, evidence(ent))}, nil
			}
			if evidence(ent) > evidence(old) {
				old.Status, old.SupersededBy, old.Updated = memory.StatusSuperseded, ent.ID, now
				writes = append(writes, old)
				notes = append(notes, fmt.Sprintf("supersedes contradicting %s (evidence %d vs %d)", old.ID, evidence(ent), evidence(old)))
				continue
			}
			ent.Status, ent.SupersededBy, ent.Updated = memory.StatusSuperseded, old.ID, now
			if err := e.putAll(ctx, append(writes, ent)); err != nil {
				return protocol.IngestAction{}, err
			}
			return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActSuperseded,
				Detail: fmt.Sprintf("contradicts strategic %s, which has more evidence (%d vs %d)", old.ID, evidence(old), evidence(ent))}, nil
		}
	}
	ent.Tier, ent.Updated = protocol.TierStrategic, now
	if err := e.putAll(ctx, append(writes, ent)); err != nil {
		return protocol.IngestAction{}, err
	}
	detail := fmt.Sprintf("%d distinct sessions", ent.DistinctSessions())
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActPromoted, Detail: detail}, nil
}

// inherit gives ent the evidence of an entry it replaces.
func inherit(ent *memory.Entry, old memory.Entry) {
	mergeSessions(ent, old)
	ent.Hits += old.Hits
	ent.Helpful += old.Helpful
	ent.Harmful += old.Harmful
	ent.Tools = union(ent.Tools, old.Tools)
	ent.Mined = union(ent.Mined, old.Mined)
	bound(ent)
}

// mergeSessions adds from's session evidence to into: the listed ids are merged, and the
// sessions counted beyond the lists are added, so the count stays right after trimming.
func mergeSessions(into *memory.Entry, from memory.Entry) {
	unlisted := into.DistinctSessions() - len(into.Sessions) + from.DistinctSessions() - len(from.Sessions)
	into.Sessions = union(into.Sessions, from.Sessions)
	into.SessionCount = len(into.Sessions) + unlisted
}

// bound keeps an entry's evidence lists to their last protocol.MaxEvidenceSessions session ids
// and protocol.MaxEvidenceMarkers markers; the counts keep the totals. The limit of this: a
// re-mine of a session whose marker has fallen off (256 later (session, candidate) pairs and
// feedbacks touched this entry since) counts that session again.
func bound(e *memory.Entry) {
	e.SessionCount = e.DistinctSessions()
	if n := len(e.Sessions) - protocol.MaxEvidenceSessions; n > 0 {
		e.Sessions = slices.Clone(e.Sessions[n:])
	}
	if n := len(e.Mined) - protocol.MaxEvidenceMarkers; n > 0 {
		e.Mined = slices.Clone(e.Mined[n:])
	}
}

func (e *Engine) putAll(ctx context.Context, es []memory.Entry) error {
	for _, x := range es {
		if _, err := e.store.Put(ctx, x); err != nil {
			return fmt.Errorf("put %s: %w", x.ID, err)
		}
	}
	return nil
}

// union appends the items of b missing from a, keeping a's order.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// Feedback applies one session's marks. Each entry counts a session's feedback once, so a
// replayed session does not inflate counters. A followed entry counts as two helpful marks.
// It returns how many entries changed.
func (e *Engine) Feedback(ctx context.Context, req protocol.FeedbackRequest) (int, error) {
	if req.SessionID == "" {
		return 0, errors.New("feedback: session id is empty")
	}
	delta := map[string][2]int{} // id -> helpful, harmful
	for _, id := range req.Helpful {
		d := delta[id]
		d[0] = max(d[0], 1)
		delta[id] = d
	}
	for _, id := range req.Followed {
		d := delta[id]
		d[0] = 2
		delta[id] = d
	}
	for _, id := range req.Harmful {
		d := delta[id]
		d[1] = 1
		delta[id] = d
	}
	ids := make([]string, 0, len(delta))
	for id := range delta {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	marker := "feedback/" + req.SessionID
	changed := 0
	for _, id := range ids {
		d := delta[id]
		err := e.retry(ctx, func() error {
			ent, err := e.store.Get(ctx, id)
			if errors.Is(err, memory.ErrNotFound) {
				return nil // evicted since it was retrieved
			}
			if err != nil {
				return err
			}
			if req.Agent != "" && ent.Agent != req.Agent {
				return nil
			}
			if slices.Contains(ent.Mined, marker) {
				return nil
			}
			ent.Helpful += d[0]
			ent.Harmful += d[1]
			ent.Mined = append(ent.Mined, marker)
			bound(&ent)
			ent.LastUsed = e.opt.Now().UTC()
			if _, err := e.store.Put(ctx, ent); err != nil {
				return err
			}
			changed++
			return nil
		})
		if err != nil {
			return changed, fmt.Errorf("feedback on %s: %w", id, err)
		}
	}
	return changed, nil
}
