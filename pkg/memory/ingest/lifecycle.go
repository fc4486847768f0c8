package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// evidence is what decides a contradiction: how many distinct sessions saw the lesson, and how
// the entry fared when it was used.
func evidence(e memory.Entry) int { return e.DistinctSessions() + e.Helpful - e.Harmful }

// window sums the helpful and harmful marks of the entry's last sessions.
func window(e memory.Entry) (helpful, harmful int) {
	for _, m := range e.Marks {
		helpful += m.Helpful
		harmful += m.Harmful
	}
	return helpful, harmful
}

// failing reports a rule that keeps hurting: at least DemoteHarmful harmful marks in its window,
// more than its helpful ones.
func (e *Engine) failing(x memory.Entry) bool {
	helpful, harmful := window(x)
	return harmful >= e.opt.DemoteHarmful && harmful > helpful
}

func demoted(x memory.Entry) bool {
	return slices.ContainsFunc(x.History, func(c protocol.MemoryChange) bool { return c.Event == protocol.ChangeDemoted })
}

// helpfulMarks is what promotion counts: the window's helpful marks, or (for an entry from before
// marks were kept, never demoted) its total.
func helpfulMarks(x memory.Entry) int {
	if len(x.Marks) == 0 && !demoted(x) {
		return x.Helpful
	}
	h, _ := window(x)
	return h
}

// eligible reports whether x has what promotion needs besides the relation check.
func (e *Engine) eligible(x memory.Entry) bool {
	return x.DistinctSessions() >= e.opt.PromotionSessions && helpfulMarks(x) >= e.opt.PromotionHelpful && !e.failing(x)
}

func (e *Engine) failingReason(x memory.Entry) string {
	helpful, harmful := window(x)
	return fmt.Sprintf("%d harmful vs %d helpful marks in its last %d sessions of feedback", harmful, helpful, len(x.Marks))
}

// record appends one change to x's history, keeping the last protocol.MaxHistory.
func record(x *memory.Entry, at time.Time, event, other, reason string) {
	x.History = append(x.History, protocol.MemoryChange{At: at, Event: event, Other: other, Reason: reason})
	if n := len(x.History) - protocol.MaxHistory; n > 0 {
		x.History = slices.Clone(x.History[n:])
	}
}

// replace marks loser superseded by winner and links both ways, each with the reason.
func replace(winner, loser *memory.Entry, at time.Time, reason string) {
	loser.Status, loser.SupersededBy, loser.Updated, winner.Updated = memory.StatusSuperseded, winner.ID, at, at
	record(loser, at, protocol.ChangeSuperseded, winner.ID, reason)
	winner.Supersedes = union(slices.DeleteFunc(slices.Clone(winner.Supersedes), func(id string) bool { return id == loser.ID }), []string{loser.ID})
	if n := len(winner.Supersedes) - protocol.MaxHistory; n > 0 {
		winner.Supersedes = slices.Clone(winner.Supersedes[n:])
	}
	record(winner, at, protocol.ChangeSupersedes, loser.ID, reason)
}

// settle applies the life-cycle rules to ent, which the caller changed and has not written yet,
// and writes it with whatever else the rules change:
//
//   - superseded: reinstated (and judged again below) when what superseded it no longer stands,
//     is failing, or has less evidence than it now has;
//   - strategic and failing: demoted to tactical, its window cleared, and the rules it had
//     superseded judged again;
//   - tactical, demoted before, failing again: retired;
//   - tactical with enough sessions and helpful marks, not failing, passing the gate again:
//     judged against the strategic entries and promoted (promote).
func (e *Engine) settle(ctx context.Context, ent memory.Entry, key string, act protocol.IngestAction) (protocol.IngestAction, error) {
	if ent.KindOf() != memory.KindGuideline {
		// Cases and skills are never promoted or contested: their marks move their utility and
		// worth, a skill's confidence moves with the cases that follow it.
		return act, e.put(ctx, ent)
	}
	now := e.opt.Now().UTC()
	if ent.Status == memory.StatusSuperseded {
		by := ent.SupersededBy
		again, why, err := e.overtakes(ctx, ent)
		if err != nil {
			return act, err
		}
		if !again {
			if why != "" {
				act.Detail += "; " + why
			}
			return act, e.put(ctx, ent)
		}
		// Back as an active tactical entry: it returns to strategic only through promotion.
		ent.Status, ent.SupersededBy, ent.Tier, ent.Updated = memory.StatusActive, "", protocol.TierTactical, now
		record(&ent, now, protocol.ChangeReinstated, by, why+"; judged again")
		act.Detail += "; reinstated, judged again: " + why
	}
	if ent.Status != memory.StatusActive {
		return act, e.put(ctx, ent)
	}
	if ent.Tier == protocol.TierStrategic {
		if !e.failing(ent) {
			return act, e.put(ctx, ent)
		}
		reason := e.failingReason(ent)
		ent.Tier, ent.Marks, ent.Updated = protocol.TierTactical, nil, now
		record(&ent, now, protocol.ChangeDemoted, "", reason)
		if err := e.put(ctx, ent); err != nil {
			return act, err
		}
		e.opt.Logger.Info("memory rule demoted", "entry", ent.ID, "agent", ent.Agent, "reason", reason)
		return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActDemoted, Detail: "strategic rule demoted to tactical: " + reason}, nil
	}
	if demoted(ent) && e.failing(ent) {
		reason := "demoted before and still failing: " + e.failingReason(ent)
		ent.Status, ent.Updated = memory.StatusRetired, now
		record(&ent, now, protocol.ChangeRetired, "", reason)
		if err := e.put(ctx, ent); err != nil {
			return act, err
		}
		e.opt.Logger.Info("memory rule retired", "entry", ent.ID, "agent", ent.Agent, "reason", reason)
		return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActRetired, Detail: reason}, nil
	}
	if ent.DistinctSessions() < e.opt.PromotionSessions {
		return act, e.put(ctx, ent)
	}
	if h := helpfulMarks(ent); h < e.opt.PromotionHelpful {
		act.Detail += fmt.Sprintf("; promotion waits for a helpful mark (%d of %d): recurrence alone is not enough", h, e.opt.PromotionHelpful)
		return act, e.put(ctx, ent)
	}
	if e.failing(ent) {
		act.Detail += "; not promoted: " + e.failingReason(ent)
		return act, e.put(ctx, ent)
	}
	// The gate again, on the text as stored: it may predate the gate, or have been judged with
	// another session's scope.
	if d := e.opt.Gate.Check(ctx, gate.Lesson{Text: ent.Text, Source: ent.Source, Agent: ent.Agent, Tools: ent.Tools}); d.Verdict != gate.Accept {
		reason := "lesson gate at promotion: " + d.Reason()
		ent.Status, ent.Updated = memory.StatusQuarantined, now
		record(&ent, now, protocol.ChangeQuarantined, "", reason)
		if err := e.put(ctx, ent); err != nil {
			return act, err
		}
		return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActQuarantine, Detail: reason}, nil
	}
	return e.promote(ctx, ent, key)
}

func (e *Engine) put(ctx context.Context, x memory.Entry) error {
	if _, err := e.store.Put(ctx, x); err != nil {
		return fmt.Errorf("put %s: %w", x.ID, err)
	}
	return nil
}

// maxChain bounds how far overtakes follows superseded_by pointers.
const maxChain = 8

// standing follows x's superseded_by pointers to the entry that stands in its place now (nil when
// the chain ends in a deleted entry).
func (e *Engine) standing(ctx context.Context, x memory.Entry) (*memory.Entry, error) {
	cur := x
	for range maxChain {
		if cur.SupersededBy == "" {
			break
		}
		next, err := e.store.Get(ctx, cur.SupersededBy)
		if errors.Is(err, memory.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", cur.SupersededBy, err)
		}
		if next.Status != memory.StatusSuperseded {
			return &next, nil
		}
		cur = next
	}
	return &cur, nil
}

// overtakes decides whether a superseded entry is judged again, and says why (or why not).
func (e *Engine) overtakes(ctx context.Context, x memory.Entry) (bool, string, error) {
	s, err := e.standing(ctx, x)
	if err != nil {
		return false, "", err
	}
	switch {
	case s == nil:
		return true, fmt.Sprintf("%s, which superseded it, is gone", x.SupersededBy), nil
	case s.Status != memory.StatusActive || s.Tier != protocol.TierStrategic:
		return true, fmt.Sprintf("%s, which stood in its place, is %s %s now", s.ID, s.Status, s.Tier), nil
	case !e.eligible(x):
		return false, fmt.Sprintf("superseded by %s; evidence %d vs %d", s.ID, evidence(x), evidence(*s)), nil
	case e.failing(*s):
		return true, fmt.Sprintf("%s is failing: %s", s.ID, e.failingReason(*s)), nil
	case evidence(x) > evidence(*s):
		return true, fmt.Sprintf("its evidence overtook %s's (%d vs %d: distinct sessions plus helpful minus harmful marks)", s.ID, evidence(x), evidence(*s)), nil
	}
	return false, fmt.Sprintf("superseded by %s; evidence %d vs %d", s.ID, evidence(x), evidence(*s)), nil
}

// reconsiderRivals judges again the entries s superseded, after s lost standing or evidence.
func (e *Engine) reconsiderRivals(ctx context.Context, s memory.Entry) error {
	var first error
	for _, id := range slices.Clone(s.Supersedes) {
		err := e.retry(ctx, func() error {
			r, err := e.store.Get(ctx, id)
			if errors.Is(err, memory.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if r.Status != memory.StatusSuperseded || r.SupersededBy != s.ID {
				return nil
			}
			act, err := e.settle(ctx, r, "", protocol.IngestAction{EntryID: r.ID})
			if err == nil && act.Action != "" {
				e.opt.Logger.Info("memory rival judged again", "entry", r.ID, "after", s.ID, "action", act.Action, "detail", act.Detail)
			}
			return err
		})
		if err != nil && first == nil {
			first = fmt.Errorf("judge %s again: %w", id, err)
		}
	}
	return first
}

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
		judged := string(v.Relation)
		if v.Reason != "" {
			judged += " (" + v.Reason + ")"
		}
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
			bound(&old)
			replace(&old, &ent, now, "judged "+judged+": the strategic rule takes its evidence")
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
			replace(&ent, &old, now, "judged "+judged)
			writes = append(writes, old)
			notes = append(notes, "refines "+old.ID)
		case Contradiction:
			if v.Reconciled != "" {
				if d := e.opt.Gate.Check(ctx, gate.Lesson{Text: v.Reconciled, Source: ent.Source, Agent: ent.Agent, Tools: union(ent.Tools, old.Tools)}); d.Verdict != gate.Accept {
					e.opt.Logger.Warn("reconciled guideline refused by the lesson gate; settled by evidence instead", "candidate", ent.ID, "strategic", old.ID, "reason", d.Reason())
				} else {
					vecs, err := e.emb.Embed(ctx, []string{d.Text})
					if err != nil {
						return protocol.IngestAction{}, fmt.Errorf("embed reconciled guideline: %w", err)
					}
					record(&ent, now, protocol.ChangeReworded, old.ID, fmt.Sprintf("reconciled with %s; was %q", old.ID, ent.Text))
					ent.Text, ent.Embedding, ent.Model = d.Text, vecs[0], e.emb.Model()
					inherit(&ent, old)
					replace(&ent, &old, now, "judged "+judged+": reconciled into one guideline")
					writes = append(writes, old)
					notes = append(notes, "reconciled with "+old.ID)
					continue
				}
			}
			won, tie, why := e.contest(ent, old)
			switch {
			case tie:
				// A tie settles nothing: the candidate stays an active tactical entry (still
				// retrieved with tasks) and is judged again when its next session arrives.
				// The old wording never wins by default, and neither side is lost.
				if err := e.put(ctx, ent); err != nil {
					return protocol.IngestAction{}, err
				}
				return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActDeferred,
					Detail: fmt.Sprintf("contradicts strategic %s with equal evidence (%d); promotion waits for more", old.ID, evidence(ent))}, nil
			case won:
				replace(&ent, &old, now, "judged "+judged+"; "+why)
				writes = append(writes, old)
				notes = append(notes, fmt.Sprintf("supersedes contradicting %s (%s)", old.ID, why))
			default:
				replace(&old, &ent, now, "judged "+judged+"; "+why)
				if err := e.putAll(ctx, append(writes, old, ent)); err != nil {
					return protocol.IngestAction{}, err
				}
				return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActSuperseded,
					Detail: fmt.Sprintf("contradicts strategic %s, which stands: %s", old.ID, why)}, nil
			}
		}
	}
	detail := fmt.Sprintf("%d distinct sessions, %d helpful marks", ent.DistinctSessions(), helpfulMarks(ent))
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	ent.Tier, ent.Updated = protocol.TierStrategic, now
	record(&ent, now, protocol.ChangePromoted, "", detail)
	if err := e.putAll(ctx, append(writes, ent)); err != nil {
		return protocol.IngestAction{}, err
	}
	return protocol.IngestAction{Key: key, EntryID: ent.ID, Action: ActPromoted, Detail: detail}, nil
}

// contest settles a contradiction between a candidate and a strategic rule: a failing rule loses
// to one that is not; otherwise the greater evidence wins, and equal evidence is a tie.
func (e *Engine) contest(cand, old memory.Entry) (won, tie bool, why string) {
	cf, of := e.failing(cand), e.failing(old)
	switch {
	case of && !cf:
		return true, false, fmt.Sprintf("%s is failing: %s", old.ID, e.failingReason(old))
	case cf && !of:
		return false, false, fmt.Sprintf("%s is failing: %s", cand.ID, e.failingReason(cand))
	}
	ce, oe := evidence(cand), evidence(old)
	why = fmt.Sprintf("evidence %d vs %d (distinct sessions plus helpful minus harmful marks)", ce, oe)
	return ce > oe, ce == oe, why
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
		if err := e.put(ctx, x); err != nil {
			return err
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
