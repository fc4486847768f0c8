package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/cases"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// kindFlag reads --kind: guideline, case, skill or all (the wire's "*").
func kindFlag(kind string) (string, error) {
	switch kind {
	case "all", "*":
		return memory.KindAny, nil
	case memory.KindGuideline, memory.KindCase, memory.KindSkill:
		return kind, nil
	}
	return "", &exitError{code: protocol.ExitUsage, msg: fmt.Sprintf("skein: --kind must be guideline, case, skill or all, got %q", kind)}
}

// entryLine is one line of `memory list` for an entry of any kind.
func entryLine(e memory.Entry) string {
	status := ""
	switch {
	case e.SupersededBy != "":
		status = fmt.Sprintf("  (%s by %s)", e.Status, e.SupersededBy)
	case e.Status != memory.StatusActive:
		status = fmt.Sprintf("  (%s)", e.Status)
	}
	switch {
	case e.Case != nil:
		c := e.Case
		skill := ""
		if c.Skill != "" {
			skill = "  skill " + c.Skill
		}
		return fmt.Sprintf("%s  %-12s case      %-22s quality %.2f  %d steps  %-10s %s%s%s", e.ID, e.Agent, c.Outcome, c.Quality, len(c.Approach),
			sourceLabel(e), clipText(c.Intent, 70), skill, status)
	case e.Skill != nil:
		k := e.Skill
		return fmt.Sprintf("%s  %-12s skill     %-9s v%-2d confidence %.2f  %d confirmed  %d weakened  %d cases  %s%s", e.ID, e.Agent, k.Maturity, k.Version,
			k.Confidence, k.Confirmed, k.Weakened, len(k.Cases), k.Name, status)
	}
	return fmt.Sprintf("%s  %-12s %-9s %-7s sessions %-3d helpful %-3d harmful %-3d %-10s %s%s", e.ID, e.Agent, e.Tier, e.Polarity,
		e.DistinctSessions(), e.Helpful, e.Harmful, sourceLabel(e), clipText(e.Text, 90), status)
}

// printBody writes a case's or a skill's body with its evidence: a case's steps, insight,
// evidence, cost and sessions; a skill's procedure and the cases behind it.
func printBody(w io.Writer, e memory.Entry, indent string) {
	if c := e.Case; c != nil {
		fmt.Fprintf(w, "%sintent: %s\n%soutcome %s, quality %.2f, distilled by %s", indent, c.Intent, indent, c.Outcome, c.Quality, c.Extractor)
		if c.Refused != "" {
			fmt.Fprintf(w, " (the model's answer was refused: %s)", c.Refused)
		}
		fmt.Fprintln(w)
		for i, s := range c.Approach {
			res := "ok"
			if !s.OK {
				res = "failed: " + s.Error
			}
			note := ""
			if s.Note != "" {
				note = "  (" + s.Note + ")"
			}
			fmt.Fprintf(w, "%s  %d. %s %s -> %s%s\n", indent, i+1, s.Tool, cases.ShowArgs(s.Args), res, note)
		}
		if c.Insight != "" {
			fmt.Fprintf(w, "%sinsight: %s\n", indent, c.Insight)
		}
		if c.Evidence != "" {
			fmt.Fprintf(w, "%sevidence: %q\n", indent, c.Evidence)
		}
		fmt.Fprintf(w, "%scost: %d in / %d out tokens, $%.4f, %d tool calls (%d failed), %.1fs; sessions %s\n", indent, c.Cost.InputTokens,
			c.Cost.OutputTokens, c.Cost.USD, c.Cost.ToolCalls, c.Cost.ToolFailures, c.Cost.WallS, strings.Join(e.Sessions, ", "))
	}
	if k := e.Skill; k != nil {
		fmt.Fprintf(w, "%s%s v%d, %s, confidence %.2f (%d confirmed, %d weakened), written by %s\n", indent, k.Name, k.Version, k.Maturity,
			k.Confidence, k.Confirmed, k.Weakened, k.Writer)
		for _, p := range k.Preconditions {
			fmt.Fprintf(w, "%s  before: %s\n", indent, p)
		}
		for i, s := range k.Steps {
			fmt.Fprintf(w, "%s  %d. %s\n", indent, i+1, s.Text)
		}
		for _, p := range k.Pitfalls {
			fmt.Fprintf(w, "%s  pitfall: %s\n", indent, p)
		}
		fmt.Fprintf(w, "%scases: %s\n", indent, strings.Join(k.Cases, ", "))
	}
}

// kindCounts tallies inspect counts per agent and kind.
func kindCounts(cs []protocol.MemoryCount) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, c := range cs {
		if c.Kind == "" || c.Status != memory.StatusActive {
			continue
		}
		if out[c.Agent] == nil {
			out[c.Agent] = map[string]int{}
		}
		out[c.Agent][c.Kind] += c.N
	}
	return out
}
