package miner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/memory/gate"
	"github.com/skein-mesh/skein/pkg/memory/profile"
	"github.com/skein-mesh/skein/pkg/trace"
)

// lesson is a mined failure lesson with the evidence it came from.
type lesson struct {
	ev   Evidence
	text string
}

// learnProfile offers the session's failure lessons to the agent's standing profile as signals
// and proposes a patch for each one that now passes the gates (pkg/memory/profile.Propose). The
// miner knows the profile of the agent of its own config only: sessions of other agents teach
// their profiles through their own miners' configs.
func learnProfile(ctx context.Context, d Deps, s Session, lessons []lesson) ([]profile.Patch, error) {
	a := d.Config.Agent
	if a.Profile == "" || !a.ProfileLearning.Enabled || s.Agent != a.Name || len(lessons) == 0 {
		return nil, nil
	}
	pl := a.ProfileLearning
	lim := profile.Limits{Budget: pl.MaxTokens, PatchBudget: pl.PatchTokens, MinSessions: pl.MinSessions, AutoApply: pl.AutoApply,
		Section: pl.Section}
	var judge gate.Judge
	// Like memoryd's, the gate's judge is the miner's own model (miner.llm), never the agent's.
	if m := d.model(); m != nil && d.Config.Miner.LLM != nil {
		judge = gate.ModelJudge{Backend: m, Model: d.Config.Miner.LLM.Model}
	}
	checks := profile.Checks{Limits: lim, Gate: gate.New(judge, d.Logger, 0), Now: time.Now(),
		Lesson: gate.Lesson{Source: gate.SourceMined, Agent: a.Name, Session: s.ID, Scope: s.Scope(), Seen: s.Seen()},
		Verify: verifier(d, s)}
	var out []profile.Patch
	err := profile.Update(a.Profile, func(text string, l *profile.Ledger) error {
		for _, ls := range lessons {
			q, ok := quoteOf(s, ls.ev)
			if !ok {
				continue
			}
			l.Observe(profile.Signal{Key: ls.ev.Key, Rule: ls.text, Tools: ls.ev.Tools, Evidence: []profile.Quote{q}}, checks.Now)
			o, err := profile.Propose(ctx, text, l, ls.ev.Key, checks)
			if err != nil {
				return err
			}
			if o.Patch == nil {
				d.Logger.Debug("no profile patch yet", "session", s.ID, "rule", ls.text, "held", o.Held)
				continue
			}
			d.Logger.Info("profile patch", "id", o.Patch.ID, "status", o.Patch.Status, "rule", o.Patch.Rule, "reason", o.Patch.Reason,
				"sessions", len(o.Patch.Evidence))
			out = append(out, *o.Patch)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", a.Profile, err)
	}
	return out, nil
}

// quoteOf is the verbatim evidence of a failure lesson: the error its tool's failed call returned
// (or, when that says only "exited 1", the last line of its stderr), at most MaxQuoteLen bytes.
func quoteOf(s Session, ev Evidence) (profile.Quote, bool) {
	for _, c := range s.Calls {
		if c.Tool != ev.Tool || !c.Failed() || realError(c.Result) != ev.Error {
			continue
		}
		text := strings.TrimSpace(c.Result.Error)
		if text == "" || genericRE.MatchString(text) {
			text = stderrTail(c.Result.Stderr, 1, profile.MaxQuoteLen)
		}
		if len(text) > profile.MaxQuoteLen {
			text = strings.ToValidUTF8(text[:profile.MaxQuoteLen], "")
		}
		return profile.Quote{Session: s.ID, Tool: c.Tool, Text: text}, text != ""
	}
	return profile.Quote{}, false
}

// verifier re-reads a quote's session from the trace stream (the current one from memory) and
// finds the quote verbatim in the error or stderr of a failed call of its tool.
func verifier(d Deps, cur Session) func(context.Context, profile.Quote) (bool, error) {
	sessions := map[string]Session{cur.ID: cur}
	return func(ctx context.Context, q profile.Quote) (bool, error) {
		s, ok := sessions[q.Session]
		if !ok {
			events, err := trace.Read(ctx, d.Conn.JS, d.Names, q.Session)
			if err != nil {
				return false, err
			}
			s = ParseSession(q.Session, events)
			sessions[q.Session] = s
		}
		for _, c := range s.Calls {
			if c.Tool != q.Tool || !c.Failed() {
				continue
			}
			// The tool's error is trajectory data the quote must be found in, not an error of
			// skein's to classify.
			output := []string{c.Result.Error, c.Result.Stderr}
			if slices.ContainsFunc(output, func(o string) bool { return strings.Contains(o, q.Text) }) {
				return true, nil
			}
		}
		return false, nil
	}
}
