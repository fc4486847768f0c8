package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/extract"
	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/memory/skills"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// SkillOptions configure the skill life cycle.
type SkillOptions struct {
	skills.Options
	Enabled bool
	// Writer, when set, asks a model to write a skill's procedure when it forms or changes
	// (checked in code; the template stands when it is refused).
	Writer extract.Ask
}

// SkillID is the deterministic id of the skill a cluster forms, from its oldest case.
func SkillID(agent, firstCase string) string {
	h := sha256.Sum256([]byte("skill\x00" + agent + "\x00" + firstCase))
	return "k" + hex.EncodeToString(h[:12])
}

// recentCases is how many of a skill's newest supporting cases its procedure is written from.
const recentCases = 6

// applySkill lets an active case meet the agent's skills. When its task and its tool sequence are
// like a skill's, it confirms the skill (it succeeded: support grows by its quality, and its
// insight may add a pitfall) or weakens it (it failed: against grows by one); the procedure is
// rewritten when its cases now follow another sequence or teach a new pitfall (a new version),
// maturity and confidence are settled, and a skill whose confidence falls below the retirement
// threshold is retired. A successful case that follows no skill looks for similar successful
// cases of its agent that no active skill claims; with enough of them (distinct sessions) they
// form a new skill. The case records the skill it supported or weakened.
func (e *Engine) applySkill(ctx context.Context, c memory.Entry) ([]protocol.IngestAction, error) {
	if c.Case == nil || c.Case.Skill != "" {
		return nil, nil
	}
	sig := skills.Signature(c.Case.Approach)
	if len(sig) == 0 {
		return nil, nil
	}
	o := e.opt.Skills.WithDefaults()
	hits, err := e.store.Search(ctx, c.Embedding, 4, memory.Filter{Agent: c.Agent, Kind: memory.KindSkill})
	if err != nil {
		return nil, fmt.Errorf("search skills: %w", err)
	}
	var best *memory.Hit
	for i, h := range hits {
		if h.Score >= o.IntentFloor && h.Entry.Skill != nil && skills.Similar(sig, h.Entry.Skill.Signature) >= o.ApproachFloor {
			best = &hits[i]
			break
		}
	}
	if best != nil {
		return e.followed(ctx, c, best.Entry.ID, best.Score)
	}
	if !c.Case.Succeeded() || c.Case.Quality < o.MinQuality {
		return nil, nil
	}
	return e.cluster(ctx, c, sig)
}

// followed applies a case to the skill it followed.
func (e *Engine) followed(ctx context.Context, c memory.Entry, skillID string, score float64) ([]protocol.IngestAction, error) {
	o := e.opt.Skills.WithDefaults()
	now := e.opt.Now().UTC()
	var act protocol.IngestAction
	err := e.retry(ctx, func() error {
		k, err := e.store.Get(ctx, skillID)
		if errors.Is(err, memory.ErrNotFound) {
			act = protocol.IngestAction{}
			return nil
		}
		if err != nil {
			return err
		}
		if k.Status != memory.StatusActive || k.Skill == nil || slices.Contains(k.Skill.Cases, c.ID) {
			act = protocol.IngestAction{}
			return nil
		}
		s := *k.Skill
		s.Cases = append(slices.Clone(s.Cases), c.ID)
		if n := len(s.Cases) - protocol.MaxSkillCases; n > 0 {
			s.Cases = s.Cases[n:]
		}
		was := s.Maturity
		k.Sessions = union(k.Sessions, c.Sessions)
		k.SessionCount = max(k.SessionCount+1, len(k.Sessions))
		bound(&k)
		var what, why string
		if c.Case.Succeeded() {
			s.Confirmed++
			s.Support += c.Case.Quality
			what, why = ActConfirmed, fmt.Sprintf("case %s followed it and succeeded (quality %.2f, similarity %.2f)", c.ID, c.Case.Quality, score)
		} else {
			s.Weakened++
			s.Against++
			what, why = ActWeakened, fmt.Sprintf("case %s followed it and ended %s (similarity %.2f)", c.ID, c.Case.Outcome, score)
		}
		k.Skill = &s
		changed, err := e.rewrite(ctx, &k, c)
		if err != nil {
			return err
		}
		retire := o.Settle(k.Skill)
		k.Updated = now
		record(&k, now, what, c.ID, fmt.Sprintf("%s; confidence %.2f, %s", why, k.Skill.Confidence, k.Skill.Maturity))
		act = protocol.IngestAction{Key: "skill:" + k.ID, EntryID: k.ID, Action: what,
			Detail: fmt.Sprintf("%s v%d: confidence %.2f, %s (%d confirmed, %d weakened)", s.Name, k.Skill.Version, k.Skill.Confidence, k.Skill.Maturity, s.Confirmed, s.Weakened)}
		if changed != "" {
			record(&k, now, ActUpdated, c.ID, changed)
			act.Detail += "; " + changed
		}
		if was != k.Skill.Maturity {
			act.Detail += "; now " + k.Skill.Maturity
		}
		if retire {
			reason := fmt.Sprintf("confidence %.2f fell below %.2f (%d confirmed, %d weakened)", k.Skill.Confidence, o.RetireConfidence, s.Confirmed, s.Weakened)
			k.Status = memory.StatusRetired
			record(&k, now, protocol.ChangeRetired, c.ID, reason)
			act.Action, act.Detail = ActRetired, act.Detail+"; retired: "+reason
			e.opt.Logger.Info("memory skill retired", "skill", k.ID, "agent", k.Agent, "reason", reason)
		}
		_, err = e.store.Put(ctx, k)
		return err
	})
	if err != nil || act.Action == "" {
		return nil, err
	}
	return []protocol.IngestAction{act}, e.link(ctx, []string{c.ID}, skillID)
}

// rewrite writes the skill's procedure again from its newest successful cases (and c): a new
// version when the tool sequence or the pitfalls changed. It returns what changed ("" nothing).
func (e *Engine) rewrite(ctx context.Context, k *memory.Entry, c memory.Entry) (string, error) {
	bodies, err := e.caseBodies(ctx, k.Skill.Cases, c)
	if err != nil || len(bodies) == 0 {
		return "", err
	}
	_, steps, sig, pitfalls := skills.Template(bodies)
	s := k.Skill
	var changes []string
	if !slices.Equal(sig, s.Signature) {
		changes = append(changes, fmt.Sprintf("steps now follow %s (were %s)", strings.Join(sig, " > "), strings.Join(s.Signature, " > ")))
	}
	for _, p := range pitfalls {
		if !slices.Contains(s.Pitfalls, p) {
			changes = append(changes, "new pitfall: "+clipTo(p, 120))
			break
		}
	}
	if len(changes) == 0 {
		return "", nil
	}
	d := skills.Draft{Name: s.Name, Steps: steps, Pitfalls: pitfalls, Preconditions: s.Preconditions}
	writer := "template"
	if e.opt.Skills.Writer != nil {
		if w, r := skills.Write(ctx, e.opt.Skills.Writer, bodies, e.opt.Skills.Options, e.opt.Logger); r == nil {
			d, writer = w, "model"
			d.Name = s.Name // a skill keeps its name across versions
		}
	}
	d, ok := e.gateDraft(ctx, k.Agent, d, union(nil, sig))
	if !ok {
		return "", nil // the new wording did not pass the gate: the procedure stays as it was
	}
	s.Steps, s.Pitfalls, s.Preconditions, s.Signature, s.Writer = d.Steps, d.Pitfalls, d.Preconditions, sig, writer
	s.Version++
	return fmt.Sprintf("v%d: %s", s.Version, strings.Join(changes, "; ")), nil
}

// caseBodies reads the skill's newest successful supporting cases (at most recentCases), c last.
func (e *Engine) caseBodies(ctx context.Context, ids []string, c memory.Entry) ([]protocol.CaseBody, error) {
	var out []protocol.CaseBody
	for i := len(ids) - 1; i >= 0 && len(out) < recentCases-1; i-- {
		if ids[i] == c.ID {
			continue
		}
		x, err := e.store.Get(ctx, ids[i])
		if errors.Is(err, memory.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if x.Case != nil && x.Case.Succeeded() && x.Status == memory.StatusActive {
			out = append(out, *x.Case)
		}
	}
	slices.Reverse(out)
	if c.Case.Succeeded() {
		out = append(out, *c.Case)
	}
	return out, nil
}

// gateDraft passes every text of a procedure through the lesson gate: a draft with any text the
// gate does not accept is not used.
func (e *Engine) gateDraft(ctx context.Context, agent string, d skills.Draft, tools []string) (skills.Draft, bool) {
	texts := append(append(slices.Clone(d.Preconditions), d.Pitfalls...), d.Name)
	for _, s := range d.Steps {
		texts = append(texts, s.Text)
	}
	dec := e.opt.Gate.Check(ctx, gate.Lesson{Kind: memory.KindSkill, Text: strings.Join(texts, "\n"), Source: memory.SourceMiner, Agent: agent, Tools: tools})
	if dec.Verdict != gate.Accept {
		e.opt.Logger.Warn("skill procedure held back by the lesson gate", "agent", agent, "skill", d.Name, "verdict", dec.Verdict, "reason", dec.Reason())
		return d, false
	}
	for i := range d.Preconditions {
		d.Preconditions[i] = gate.Normalize(d.Preconditions[i])
	}
	for i := range d.Pitfalls {
		d.Pitfalls[i] = gate.Normalize(d.Pitfalls[i])
	}
	for i := range d.Steps {
		d.Steps[i].Text = gate.Normalize(d.Steps[i].Text)
	}
	return d, true
}

// cluster forms a skill when c and enough similar successful cases, from distinct sessions and
// claimed by no active skill, share a task and a tool sequence.
func (e *Engine) cluster(ctx context.Context, c memory.Entry, sig []string) ([]protocol.IngestAction, error) {
	o := e.opt.Skills.WithDefaults()
	hits, err := e.store.Search(ctx, c.Embedding, 32, memory.Filter{Agent: c.Agent, Kind: memory.KindCase, Polarity: protocol.PolarityPattern})
	if err != nil {
		return nil, fmt.Errorf("search cases: %w", err)
	}
	members := []memory.Entry{c}
	sessions := slices.Clone(c.Sessions)
	for _, h := range hits {
		x := h.Entry
		if x.ID == c.ID || h.Score < o.IntentFloor || x.Case == nil || x.Case.Quality < o.MinQuality || !x.Case.Succeeded() ||
			skills.Similar(sig, skills.Signature(x.Case.Approach)) < o.ApproachFloor || overlaps(sessions, x.Sessions) {
			continue
		}
		if x.Case.Skill != "" {
			if k, err := e.store.Get(ctx, x.Case.Skill); err == nil && k.Status == memory.StatusActive {
				continue // claimed by a standing skill
			}
		}
		members = append(members, x)
		sessions = append(sessions, x.Sessions...)
	}
	if len(members) < o.MinCases {
		return nil, nil
	}
	sort.SliceStable(members, func(i, j int) bool {
		if !members[i].Created.Equal(members[j].Created) {
			return members[i].Created.Before(members[j].Created)
		}
		return members[i].ID < members[j].ID
	})
	if len(members) > recentCases {
		members = members[len(members)-recentCases:]
	}
	bodies := make([]protocol.CaseBody, len(members))
	ids := make([]string, len(members))
	var support float64
	for i, m := range members {
		bodies[i], ids[i] = *m.Case, m.ID
		support += m.Case.Quality
	}
	name, steps, sig, pitfalls := skills.Template(bodies)
	d, writer := skills.Draft{Name: name, Steps: steps, Pitfalls: pitfalls}, "template"
	if e.opt.Skills.Writer != nil {
		if w, r := skills.Write(ctx, e.opt.Skills.Writer, bodies, e.opt.Skills.Options, e.opt.Logger); r == nil {
			d, writer = w, "model"
		}
	}
	d, ok := e.gateDraft(ctx, c.Agent, d, union(nil, sig))
	if !ok && writer == "model" {
		// The model's wording did not pass; the template's may.
		d, ok = e.gateDraft(ctx, c.Agent, skills.Draft{Name: name, Steps: steps, Pitfalls: pitfalls}, union(nil, sig))
		writer = "template"
	}
	if !ok {
		return []protocol.IngestAction{{Key: "skill:" + name, Action: ActQuarantine, Detail: "the procedure did not pass the lesson gate; no skill formed"}}, nil
	}
	now := e.opt.Now().UTC()
	text := d.Name + ": " + c.Case.Intent
	vecs, err := e.emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, fmt.Errorf("embed skill: %w", err)
	}
	body := &protocol.SkillBody{Name: d.Name, Version: 1, Preconditions: d.Preconditions, Steps: d.Steps, Pitfalls: d.Pitfalls,
		Confirmed: len(members), Support: support, Cases: ids, Signature: sig, Writer: writer}
	o.Settle(body)
	var all []string
	var tools []string
	for _, m := range members {
		all = union(all, m.Sessions)
		tools = union(tools, m.Tools)
	}
	k := memory.Entry{ID: SkillID(c.Agent, ids[0]), Agent: c.Agent, Kind: memory.KindSkill, Text: text, Polarity: protocol.PolarityPattern,
		Tier: protocol.TierTactical, Tools: tools, Sessions: all, SessionCount: len(all), Hits: len(members), Model: e.emb.Model(),
		Embedding: vecs[0], Source: memory.SourceMiner, Status: memory.StatusActive, Created: now, Updated: now, Skill: body}
	bound(&k)
	record(&k, now, ActFormed, c.ID, fmt.Sprintf("%d similar successful cases (%s) follow %s; confidence %.2f, %s",
		len(members), strings.Join(ids, ", "), strings.Join(sig, " > "), body.Confidence, body.Maturity))
	if _, err := e.store.Put(ctx, k); err != nil {
		if errors.Is(err, memory.ErrConflict) {
			return nil, nil // another replica formed it from the same cluster
		}
		return nil, err
	}
	e.opt.Logger.Info("memory skill formed", "skill", k.ID, "agent", k.Agent, "name", body.Name, "cases", len(members))
	act := protocol.IngestAction{Key: "skill:" + k.ID, EntryID: k.ID, Action: ActFormed,
		Detail: fmt.Sprintf("%s v1 from %d cases: confidence %.2f, %s (%s)", body.Name, len(members), body.Confidence, body.Maturity, writer)}
	return []protocol.IngestAction{act}, e.link(ctx, ids, k.ID)
}

// link records on each case the skill it supports.
func (e *Engine) link(ctx context.Context, caseIDs []string, skillID string) error {
	for _, id := range caseIDs {
		err := e.retry(ctx, func() error {
			x, err := e.store.Get(ctx, id)
			if errors.Is(err, memory.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if x.Case == nil || x.Case.Skill == skillID {
				return nil
			}
			b := *x.Case
			b.Skill = skillID
			x.Case = &b
			_, err = e.store.Put(ctx, x)
			return err
		})
		if err != nil {
			return fmt.Errorf("link case %s to skill %s: %w", id, skillID, err)
		}
	}
	return nil
}

func overlaps(a, b []string) bool {
	return slices.ContainsFunc(b, func(s string) bool { return slices.Contains(a, s) })
}

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
