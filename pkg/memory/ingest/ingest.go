// Package ingest applies the memory rules to mined candidates over any memory.Store:
// the lesson gate first (pkg/memory/gate: normalised text, or a quarantined entry, or nothing),
// near-duplicate merging by cosine within one polarity, idempotence per (session, candidate
// key), in-place promotion after enough distinct sessions and at least one helpful mark, a
// relation check against the agent's strategic entries before promotion (duplicate,
// refinement, contradiction, independent), supersession instead of deletion, feedback
// counters, echo/fizzle utility, and capacity eviction.
//
// Evidence decides, and keeps deciding. A contradiction is settled by evidence: distinct
// sessions plus helpful minus harmful marks, and a rule whose harmful marks outweigh its helpful
// ones over the feedback window loses to a rival that is not failing. The loser is marked
// superseded with a pointer to the winner (and the winner lists it), never deleted, and keeps
// counting: when its evidence overtakes the rule that superseded it, or that rule starts
// failing or stops standing, it is reinstated and judged again, and may replace it. A strategic
// rule that keeps being marked harmful is demoted to tactical, and retired if it goes on. Every
// change is written to the entries' history with its time and reason. A model judge may return a
// reconciled guideline, which replaces the candidate's text in place (after passing the gate).
// A tie promotes nothing: the candidate stays an active tactical entry and is judged again when
// its next session arrives.
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
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/memory/skills"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Defaults of the memory section.
const (
	DefaultSimilarityThreshold = 0.85
	DefaultPromotionSessions   = 3
	DefaultCapacity            = 2000
	DefaultCaseCapacity        = 1000
	DefaultSkillCapacity       = 200
	DefaultRelatedFloor        = 0.60
	DefaultDuplicateFloor      = 0.92
	DefaultPromotionHelpful    = 1
	DefaultFeedbackWindow      = 10
	DefaultDemoteHarmful       = 3
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
	ActRejected   = "rejected"   // the lesson gate refused the text; nothing was stored
	ActQuarantine = "quarantined"
	ActDemoted    = "demoted"
	ActRetired    = "retired"
)

// Options are the ingest rules' parameters.
type Options struct {
	SimilarityThreshold float64
	PromotionSessions   int
	// Capacity bounds the guidelines of one agent in one tier; CaseCapacity and SkillCapacity
	// the cases and the skills of one agent.
	Capacity      int
	CaseCapacity  int
	SkillCapacity int
	// Skills configures the skill life cycle of ingested cases.
	Skills SkillOptions
	// RelatedFloor: strategic entries at least this similar are judged before a promotion.
	RelatedFloor float64
	// DuplicateFloor is the rule judge's duplicate band.
	DuplicateFloor float64
	// PromotionHelpful is how many helpful marks a lesson needs, besides its sessions, to be
	// promoted: recurrence alone proves a lesson recurs, not that following it helps.
	PromotionHelpful int
	// FeedbackWindow is how many sessions' marks an entry keeps; DemoteHarmful harmful marks in
	// it, outnumbering the helpful ones, demote a strategic rule (and retire a demoted one).
	FeedbackWindow int
	DemoteHarmful  int
	// Judge classifies relations before promotion; nil means RuleJudge.
	Judge Judge
	// Gate checks every text before it is stored or promoted; nil means the rules alone.
	Gate *gate.Gate
	// KnownTools, when set, names every tool of the mesh, so the gate can tell a lesson that
	// names a tool its session never used.
	KnownTools func(context.Context) []string
	Now        func() time.Time
	Logger     *slog.Logger
	// MaxElapsed bounds the conflict retry loop of one operation.
	MaxElapsed time.Duration
}

// OptionsFrom reads the memory section, filling defaults for zero values.
func OptionsFrom(m config.Memory) Options {
	return Options{
		SimilarityThreshold: m.SimilarityThreshold,
		PromotionSessions:   m.PromotionSessions,
		Capacity:            m.Capacity,
		PromotionHelpful:    m.PromotionHelpful,
		FeedbackWindow:      m.FeedbackWindow,
		DemoteHarmful:       m.DemoteHarmful,
		CaseCapacity:        m.Cases.Capacity,
		SkillCapacity:       m.Skills.Capacity,
		Skills: SkillOptions{Enabled: m.Skills.Enabled, Options: skills.Options{
			MinCases: m.Skills.MinCases, MatureCases: m.Skills.MatureCases, MatureConfidence: m.Skills.MatureConfidence,
			RetireConfidence: m.Skills.RetireConfidence, IntentFloor: m.Skills.IntentFloor, ApproachFloor: m.Skills.ApproachFloor,
			MinQuality: m.Cases.MinQuality}},
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
	if o.CaseCapacity <= 0 {
		o.CaseCapacity = DefaultCaseCapacity
	}
	if o.SkillCapacity <= 0 {
		o.SkillCapacity = DefaultSkillCapacity
	}
	o.Skills.Options = o.Skills.Options.WithDefaults()
	if o.RelatedFloor <= 0 {
		o.RelatedFloor = DefaultRelatedFloor
	}
	if o.DuplicateFloor <= 0 {
		o.DuplicateFloor = max(DefaultDuplicateFloor, o.SimilarityThreshold)
	}
	if o.PromotionHelpful <= 0 {
		o.PromotionHelpful = DefaultPromotionHelpful
	}
	if o.FeedbackWindow <= 0 {
		o.FeedbackWindow = DefaultFeedbackWindow
	}
	o.FeedbackWindow = min(o.FeedbackWindow, protocol.MaxMarks)
	if o.DemoteHarmful <= 0 {
		o.DemoteHarmful = DefaultDemoteHarmful
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
	if o.Gate == nil {
		o.Gate = gate.New(nil, o.Logger, 0)
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
	if len(req.Cases) > protocol.MaxCasesPerRequest {
		return nil, fmt.Errorf("ingest: %d cases in one request, at most %d", len(req.Cases), protocol.MaxCasesPerRequest)
	}
	var first error
	acts := make([]protocol.IngestAction, 0, len(req.Candidates)+len(req.Cases))
	for _, c := range req.Cases {
		as, err := e.IngestCase(ctx, req.Agent, req.SessionID, c, req.Scope, req.Seen)
		if err != nil {
			as = append(as, protocol.IngestAction{Key: "case:" + c.Key, Action: "error", Detail: err.Error()})
			if first == nil {
				first = err
			}
		}
		acts = append(acts, as...)
	}
	for _, c := range req.Candidates {
		a, err := e.IngestScoped(ctx, req.Agent, req.SessionID, c, req.Scope, req.Seen)
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

// IngestOne applies one candidate from one session whose tools and data are not known.
func (e *Engine) IngestOne(ctx context.Context, agent, session string, c protocol.Candidate) (protocol.IngestAction, error) {
	return e.IngestScoped(ctx, agent, session, c, nil, nil)
}

// IngestScoped applies one candidate from one session whose tools (scope) and hosts (seen) are
// known to the gate (nil: unknown).
func (e *Engine) IngestScoped(ctx context.Context, agent, session string, c protocol.Candidate, scope, seen []string) (protocol.IngestAction, error) {
	c.Text = strings.TrimSpace(c.Text)
	key := CandidateKey(c)
	if c.Text == "" {
		return protocol.IngestAction{Key: key, Action: ActSkipped, Detail: "empty text"}, nil
	}
	if c.Polarity != protocol.PolarityAvoid && c.Polarity != protocol.PolarityPattern {
		return protocol.IngestAction{}, fmt.Errorf("ingest %s: unknown polarity %q", key, c.Polarity)
	}
	if c.Source == "" {
		c.Source = memory.SourceMiner
	}
	d := e.opt.Gate.Check(ctx, gate.Lesson{Text: c.Text, Source: c.Source, Agent: agent, Session: session, Tools: c.Tools,
		Scope: scope, Known: e.known(ctx, scope), Seen: seen})
	if d.Verdict == gate.Reject {
		return protocol.IngestAction{Key: key, Action: ActRejected, Detail: "lesson gate: " + d.Reason()}, nil
	}
	if c.Text = d.Text; c.Text == "" {
		return protocol.IngestAction{Key: key, Action: ActSkipped, Detail: "empty text"}, nil
	}
	held := ""
	if d.Verdict == gate.Quarantine {
		held = d.Reason()
	}
	vecs, err := e.emb.Embed(ctx, []string{c.Text})
	if err != nil {
		return protocol.IngestAction{}, fmt.Errorf("ingest %s: embed: %w", key, err)
	}
	var act protocol.IngestAction
	err = e.retry(ctx, func() error {
		var err error
		act, err = e.ingestOnce(ctx, agent, session, key, c, vecs[0], held)
		return err
	})
	if err != nil {
		return protocol.IngestAction{}, fmt.Errorf("ingest %s: %w", key, err)
	}
	return act, nil
}

// known is the tool catalogue for the gate, when the session's own tools are known to compare
// it with.
func (e *Engine) known(ctx context.Context, scope []string) []string {
	if scope == nil || e.opt.KnownTools == nil {
		return nil
	}
	return e.opt.KnownTools(ctx)
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

// ingestOnce counts the candidate into its entry (the same text, or a similar entry of the same
// polarity, whatever its status: a superseded lesson keeps counting) or a new one, then lets the
// life-cycle rules decide. A quarantined text only ever counts into a quarantined entry.
func (e *Engine) ingestOnce(ctx context.Context, agent, session, key string, c protocol.Candidate, vec []float32, held string) (protocol.IngestAction, error) {
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
		f := memory.Filter{Agent: agent, Polarity: c.Polarity, Status: memory.StatusAny}
		if held != "" {
			f.Status = memory.StatusQuarantined
		}
		hits, err := e.store.Search(ctx, vec, 4, f)
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
	switch {
	case target != nil && held != "" && target.Status != memory.StatusQuarantined:
		// The same text stands elsewhere; this session's copy of it is what the gate held back.
		return protocol.IngestAction{Key: key, EntryID: target.ID, Action: ActQuarantine,
			Detail: "lesson gate held this session's copy back, not counted: " + held}, nil
	case target != nil:
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
			act.Detail += fmt.Sprintf(" (entry is %s", ent.Status)
			if ent.SupersededBy != "" {
				act.Detail += " by " + ent.SupersededBy
			}
			act.Detail += ")"
		}
	default:
		ent = memory.Entry{
			ID: id, Agent: agent, Text: c.Text, Polarity: c.Polarity, Tier: protocol.TierTactical,
			Tools: union(nil, c.Tools), Sessions: []string{session}, SessionCount: 1, Hits: 1,
			Model: e.emb.Model(), Embedding: vec, Source: c.Source, Status: memory.StatusActive,
			Mined: []string{marker}, Created: now, Updated: now,
		}
		if c.Source == memory.SourceSubagent || c.Source == memory.SourceRemembered {
			ent.SourceAgent, ent.SourceSession = c.SourceAgent, session
		}
		act = protocol.IngestAction{Key: key, EntryID: id, Action: ActAdded,
			Detail: fmt.Sprintf("new lesson: no %s entry of this agent within similarity %.2f", c.Polarity, e.opt.SimilarityThreshold)}
		if held != "" {
			ent.Status = memory.StatusQuarantined
			record(&ent, now, protocol.ChangeQuarantined, "", "lesson gate: "+held)
			act = protocol.IngestAction{Key: key, EntryID: id, Action: ActQuarantine, Detail: "lesson gate: " + held}
		}
	}
	return e.settle(ctx, ent, key, act)
}
