package profile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

// Checks are what Propose judges a signal with.
type Checks struct {
	Limits Limits
	// Gate is the lesson gate (nil: its rules alone); Lesson carries what is known of the
	// current session (agent, session, scope, seen) for its structural rules.
	Gate   *gate.Gate
	Lesson gate.Lesson
	// Verify re-reads a quote's session and says whether the quote is verbatim in the output of
	// a failed call of its tool there. It is asked about every quote, every time.
	Verify func(ctx context.Context, q Quote) (bool, error)
	Now    time.Time
}

// Outcome is what Propose did with a signal: Patch is the recorded patch (nil when the signal
// keeps waiting or is dropped), Held why not (a gate's name and reason).
type Outcome struct {
	Patch *Patch
	Held  string
}

// Propose judges the signal key against the four gates and, when it passes them, records a patch:
//
//   - persistence: verified, directed quotes from at least Limits.MinSessions distinct sessions;
//   - directedness: the rule names a tool, and each quote comes from a failed call of one of
//     the rule's tools in a session of this agent (the signal is about the agent's own conduct);
//   - evidence strength: each quote is at least MinQuoteLen characters and Verify finds it
//     verbatim in its session's trajectory, re-read now (a quote that cannot be re-read does
//     not count);
//   - novelty: the profile does not say it already, and no patch of this signal was ever
//     proposed (a rejected or reverted one stays decided).
//
// A signal failing persistence, directedness or strength keeps waiting for evidence; one that is
// not novel is dropped. A passing one goes through the lesson gate (reject and quarantine both
// record it quarantined: it can never be applied) and the size bounds (over: recorded refused),
// and is then applied when Limits.AutoApply, pending otherwise. text is the profile file.
func Propose(ctx context.Context, text string, l *Ledger, key string, c Checks) (Outcome, error) {
	i := slices.IndexFunc(l.Signals, func(s Signal) bool { return s.Key == key })
	if i < 0 {
		return Outcome{Held: "novelty: a patch of this signal was already proposed"}, nil
	}
	s := l.Signals[i]
	rendered := Render(text, *l)
	if len(s.Tools) == 0 {
		return Outcome{Held: "directedness: the rule names no tool of the agent"}, nil
	}
	var good []Quote
	sessions := map[string]bool{}
	for _, q := range s.Evidence {
		if !slices.Contains(s.Tools, q.Tool) || len(strings.TrimSpace(q.Text)) < MinQuoteLen {
			continue
		}
		ok, err := c.Verify(ctx, q)
		if err != nil {
			return Outcome{}, fmt.Errorf("profile: verify a quote of session %s: %w", q.Session, err)
		}
		if ok {
			good = append(good, q)
			sessions[q.Session] = true
		}
	}
	minS := max(c.Limits.MinSessions, 2)
	if len(sessions) < minS {
		return Outcome{Held: fmt.Sprintf("persistence: verified evidence from %d of %d sessions", len(sessions), minS)}, nil
	}
	if states(rendered, s.Rule) {
		l.dropSignal(key)
		return Outcome{Held: "novelty: the profile already says it"}, nil
	}

	p := Patch{ID: patchID(key), Key: key, Section: c.Limits.section(), Rule: strings.TrimSpace(s.Rule), Tools: s.Tools,
		Evidence: good, Tokens: tokenize.Count(s.Rule)}
	les := c.Lesson
	les.Kind, les.Text, les.Tools = KindPatch, p.Rule, s.Tools
	if les.Source == "" {
		les.Source = gate.SourceMined
	}
	d := c.Gate.Check(ctx, les)
	p.Rule = d.Text // normalised: what a reviewer reads is what the rules read
	after := *l
	after.Patches = append(slices.Clone(l.Patches), Patch{Status: Applied, Section: p.Section, Rule: p.Rule, Order: l.Next + 1})
	p.Diff = Diff(rendered, Render(text, after))
	p.record(c.Now, "proposed", fmt.Sprintf("evidence from %d sessions", len(sessions)))
	switch {
	case d.Verdict != gate.Accept:
		p.Status, p.Reason = Quarantined, "lesson gate: "+d.Reason()
		p.record(c.Now, "quarantined", p.Reason)
	default:
		if err := fits(text, *l, p, c.Limits); err != nil {
			p.Status, p.Reason = Refused, err.Error()
			p.record(c.Now, "refused", p.Reason)
		} else {
			p.Status = Pending
		}
	}
	l.dropSignal(key)
	l.add(p)
	out := l.Find(p.ID)
	if out.Status == Pending && c.Limits.AutoApply {
		if err := l.Apply(text, out.ID, c.Limits, c.Now, "auto_apply"); err != nil {
			return Outcome{}, err
		}
	}
	return Outcome{Patch: out}, nil
}

// KindPatch is the lesson gate's kind for profile patches.
const KindPatch = "profile_patch"
