package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// Case actions beyond the guideline ones.
const (
	ActReplaced  = "replaced"               // a conversation's later turn re-distilled the episode
	ActConfirmed = protocol.ChangeConfirmed // the case followed a skill and succeeded
	ActWeakened  = protocol.ChangeWeakened  // the case followed a skill and failed
	ActFormed    = protocol.ChangeFormed    // similar cases formed a new skill
	ActUpdated   = protocol.ChangeUpdated   // a skill's procedure changed (new version)
)

// CaseID is the deterministic id of the case of one episode: agent, the episode's first session
// and its key, so re-mining a session (or mining a conversation's later turn) writes the same
// entry.
func CaseID(agent, session, key string) string {
	h := sha256.Sum256([]byte("case\x00" + agent + "\x00" + session + "\x00" + key))
	return "c" + hex.EncodeToString(h[:12])
}

// CheckCase refuses a case candidate whose fields break protocol's bounds. Bad input loses
// nothing else: the reply says which case and why.
func CheckCase(c protocol.CaseCandidate) error {
	b := c.Case
	switch {
	case strings.TrimSpace(b.Intent) == "":
		return errors.New("case has no intent")
	case len(b.Intent) > protocol.MaxIntentChars:
		return fmt.Errorf("case intent is %d bytes, at most %d", len(b.Intent), protocol.MaxIntentChars)
	case len(b.Insight) > protocol.MaxInsightChars:
		return fmt.Errorf("case insight is %d bytes, at most %d", len(b.Insight), protocol.MaxInsightChars)
	case len(b.Evidence) > protocol.MaxEvidenceChars:
		return fmt.Errorf("case evidence is %d bytes, at most %d", len(b.Evidence), protocol.MaxEvidenceChars)
	case len(b.Approach) == 0 || len(b.Approach) > protocol.MaxCaseSteps:
		return fmt.Errorf("case approach has %d steps, want 1 to %d", len(b.Approach), protocol.MaxCaseSteps)
	case b.Quality < 0 || b.Quality > 1 || b.Quality != b.Quality:
		return fmt.Errorf("case quality %v is outside [0, 1]", b.Quality)
	case b.Outcome == "":
		return errors.New("case has no outcome")
	case len(c.Key) == 0 || len(c.Key) > protocol.MaxNoteKey:
		return fmt.Errorf("case key is %d bytes, want 1 to %d", len(c.Key), protocol.MaxNoteKey)
	case len(c.Sessions) > protocol.MaxEvidenceSessions:
		return fmt.Errorf("case spans %d sessions, at most %d", len(c.Sessions), protocol.MaxEvidenceSessions)
	}
	for i, s := range b.Approach {
		if !protocol.IDTool.Valid(s.Tool) {
			return fmt.Errorf("case step %d: tool %q is not a tool name", i+1, s.Tool)
		}
		if len(s.Args) > protocol.MaxCaseStepChars || len(s.Error) > protocol.MaxCaseStepChars || len(s.Note) > protocol.MaxCaseStepChars {
			return fmt.Errorf("case step %d: arguments, error or note longer than %d bytes", i+1, protocol.MaxCaseStepChars)
		}
	}
	for _, s := range c.Sessions {
		if !protocol.IDSession.Valid(s) {
			return fmt.Errorf("case session %q is not a session id", s)
		}
	}
	return nil
}

// caseText is the case as the lesson gate reads it: every text of it that a prompt may show.
func caseText(b protocol.CaseBody) string { return memory.ShownText(memory.Entry{Case: &b}) }

// CleanCase redacts and normalises every text of a case as the gate reads text, so what is stored is
// what was judged.
func CleanCase(b *protocol.CaseBody) {
	f := func(s string) string { return gate.Normalize(redact.String(s)) }
	b.Intent, b.Insight, b.Evidence = f(b.Intent), f(b.Insight), f(b.Evidence)
	b.Approach = slices.Clone(b.Approach)
	for i := range b.Approach {
		s := &b.Approach[i]
		s.Args, s.Error, s.Note = f(s.Args), f(s.Error), f(s.Note)
	}
}

// IngestCase stores one episode's case: checked, redacted, through the lesson gate (rejected,
// quarantined, or stored normalised), embedded by its intent, counted once per (session, key).
// The same episode mined again from a later session of its conversation replaces the body.
// An active case then meets the agent's skills: it confirms or weakens the one it followed, or
// with enough similar cases forms a new one (see applySkill).
func (e *Engine) IngestCase(ctx context.Context, agent, session string, c protocol.CaseCandidate, scope, seen []string) ([]protocol.IngestAction, error) {
	key := "case:" + c.Key
	if err := CheckCase(c); err != nil {
		return []protocol.IngestAction{{Key: key, Action: ActRejected, Detail: err.Error()}}, nil
	}
	if c.Source == "" {
		c.Source = memory.SourceMiner
	}
	first := session
	if len(c.Sessions) > 0 {
		first = c.Sessions[0]
	}
	CleanCase(&c.Case)
	tools := toolsOf(c)
	d := e.opt.Gate.Check(ctx, gate.Lesson{Kind: memory.KindCase, Text: caseText(c.Case), Source: c.Source, Agent: agent, Session: session,
		Tools: tools, Scope: scope, Known: e.known(ctx, scope), Seen: seen})
	if d.Verdict == gate.Reject {
		return []protocol.IngestAction{{Key: key, Action: ActRejected, Detail: "lesson gate: " + d.Reason()}}, nil
	}
	held := ""
	if d.Verdict == gate.Quarantine {
		held = d.Reason()
	}
	vecs, err := e.emb.Embed(ctx, []string{c.Case.Intent})
	if err != nil {
		return nil, fmt.Errorf("ingest %s: embed: %w", key, err)
	}
	id := CaseID(agent, first, c.Key)
	var act protocol.IngestAction
	var stored memory.Entry
	err = e.retry(ctx, func() error {
		var err error
		act, stored, err = e.caseOnce(ctx, id, agent, session, key, c, tools, vecs[0], held)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", key, err)
	}
	acts := []protocol.IngestAction{act}
	if (act.Action == ActAdded || act.Action == ActReplaced) && stored.Status == memory.StatusActive && e.opt.Skills.Enabled {
		sa, err := e.applySkill(ctx, stored)
		if err != nil {
			return acts, fmt.Errorf("ingest %s: skills: %w", key, err)
		}
		acts = append(acts, sa...)
	}
	return acts, nil
}

func toolsOf(c protocol.CaseCandidate) []string {
	out := union(nil, c.Tools)
	for _, s := range c.Case.Approach {
		out = union(out, []string{s.Tool})
	}
	return out
}

func (e *Engine) caseOnce(ctx context.Context, id, agent, session, key string, c protocol.CaseCandidate, tools []string, vec []float32, held string) (protocol.IngestAction, memory.Entry, error) {
	marker := minedMarker(session, key)
	now := e.opt.Now().UTC()
	pol := protocol.PolarityAvoid
	if c.Case.Succeeded() {
		pol = protocol.PolarityPattern
	}
	cur, err := e.store.Get(ctx, id)
	switch {
	case err == nil:
		if slices.Contains(cur.Mined, marker) {
			return protocol.IngestAction{Key: key, EntryID: id, Action: ActSkipped, Detail: "already counted for this session"}, cur, nil
		}
		// A later turn of the conversation carried the episode on: its case is the whole episode now.
		body := c.Case
		body.Skill = cur.Case.Skill
		cur.Case, cur.Text, cur.Embedding, cur.Model, cur.Polarity, cur.Tools = &body, body.Intent, vec, e.emb.Model(), pol, tools
		if !slices.Contains(cur.Sessions, session) {
			cur.SessionCount = cur.DistinctSessions() + 1
			cur.Sessions = append(cur.Sessions, session)
		}
		cur.Mined, cur.Updated = append(cur.Mined, marker), now
		bound(&cur)
		if held != "" && cur.Status != memory.StatusQuarantined {
			cur.Status = memory.StatusQuarantined
			record(&cur, now, protocol.ChangeQuarantined, "", "lesson gate: "+held)
		}
		out, err := e.store.Put(ctx, cur)
		if err != nil {
			return protocol.IngestAction{}, memory.Entry{}, err
		}
		return protocol.IngestAction{Key: key, EntryID: id, Action: ActReplaced, Detail: fmt.Sprintf("the episode went on in session %s: %s, quality %.2f", session, body.Outcome, body.Quality)}, out, nil
	case !errors.Is(err, memory.ErrNotFound):
		return protocol.IngestAction{}, memory.Entry{}, fmt.Errorf("get %s: %w", id, err)
	}
	body := c.Case
	sessions := union(nil, append(slices.Clone(c.Sessions), session))
	ent := memory.Entry{
		ID: id, Agent: agent, Kind: memory.KindCase, Text: body.Intent, Polarity: pol, Tier: protocol.TierTactical,
		Tools: tools, Sessions: sessions, SessionCount: len(sessions), Hits: 1, Model: e.emb.Model(), Embedding: vec,
		Source: c.Source, Status: memory.StatusActive, Mined: []string{marker}, Created: now, Updated: now, Case: &body,
	}
	if c.Source == memory.SourceSubagent {
		ent.SourceAgent, ent.SourceSession = c.SourceAgent, session
	}
	act := protocol.IngestAction{Key: key, EntryID: id, Action: ActAdded,
		Detail: fmt.Sprintf("%s, quality %.2f, %d steps (%s)", body.Outcome, body.Quality, len(body.Approach), body.Extractor)}
	if held != "" {
		ent.Status = memory.StatusQuarantined
		record(&ent, now, protocol.ChangeQuarantined, "", "lesson gate: "+held)
		act = protocol.IngestAction{Key: key, EntryID: id, Action: ActQuarantine, Detail: "lesson gate: " + held}
	}
	out, err := e.store.Put(ctx, ent)
	if err != nil {
		return protocol.IngestAction{}, memory.Entry{}, err
	}
	return act, out, nil
}
