// Package skills aggregates similar successful cases into a skill: a named, versioned procedure
// (preconditions, steps with the tools they use, pitfalls) with a maturity and a confidence that
// the cases following it keep deciding. This package is the arithmetic and the writing: which
// tool sequence a case followed (Signature) and how alike two are (Similar), the belief in a
// procedure (Belief), the procedure code can write from its cases (Template), and the model's
// rewrite of it, checked in code (Write). The ingest engine applies it to the store.
package skills

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory/cases"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// Signature is the tool sequence a case's approach followed to its end: the calls that worked,
// consecutive repeats folded. A case that never got a call through follows the sequence it tried.
func Signature(steps []protocol.CaseStep) []string {
	var out []string
	add := func(t string) {
		if n := len(out); n == 0 || out[n-1] != t {
			out = append(out, t)
		}
	}
	for _, s := range steps {
		if s.OK {
			add(s.Tool)
		}
	}
	if len(out) == 0 {
		for _, s := range steps {
			add(s.Tool)
		}
	}
	return out
}

// Similar is how alike two tool sequences are: twice their longest common subsequence over
// their total length, in [0, 1] (1: the same sequence; order matters).
func Similar(a, b []string) float64 {
	if len(a)+len(b) == 0 {
		return 1
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] >= cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return 2 * float64(prev[len(b)]) / float64(len(a)+len(b))
}

// Belief is the confidence in a procedure: the mean of Beta(1 + support, 1 + against), where
// each confirming case adds its quality to support and each case that followed the procedure
// and failed adds 1 to against. Three clean confirmations give 0.79; as many failures as
// successes bring it near 0.5.
func Belief(support, against float64) float64 { return (1 + support) / (2 + support + against) }

// Options are the thresholds of the skill life cycle (memory.skills in the config).
type Options struct {
	MinCases         int     // similar successful cases that form a skill (3)
	MatureCases      int     // confirmations a skill needs to be mature (4)
	MatureConfidence float64 // and confidence (0.7)
	RetireConfidence float64 // below this a skill is retired (0.5)
	MinQuality       float64 // a case below this quality never supports a skill (0.5)
	IntentFloor      float64 // task similarity of a case to a skill, or to the cases of its cluster (0.7)
	ApproachFloor    float64 // tool-sequence similarity, the same way (0.6)
}

// WithDefaults fills zero thresholds.
func (o Options) WithDefaults() Options {
	if o.MinCases <= 0 {
		o.MinCases = 3
	}
	if o.MatureCases <= 0 {
		o.MatureCases = 4
	}
	if o.MatureConfidence <= 0 {
		o.MatureConfidence = 0.7
	}
	if o.RetireConfidence <= 0 {
		o.RetireConfidence = 0.5
	}
	if o.MinQuality <= 0 {
		o.MinQuality = 0.5
	}
	if o.IntentFloor <= 0 {
		o.IntentFloor = 0.7
	}
	if o.ApproachFloor <= 0 {
		o.ApproachFloor = 0.6
	}
	return o
}

// Settle recomputes a skill's confidence and maturity from its evidence, and reports whether it
// must be retired.
func (o Options) Settle(s *protocol.SkillBody) (retire bool) {
	s.Confidence = Belief(s.Support, s.Against)
	s.Maturity = protocol.SkillCandidate
	if s.Confirmed >= o.MatureCases && s.Confidence >= o.MatureConfidence {
		s.Maturity = protocol.SkillMature
	}
	return s.Confidence < o.RetireConfidence
}

// Template writes the procedure of a skill from its supporting cases (newest last) in code: the
// tool sequence most of them followed, each step shown with the arguments of the newest case that
// called it successfully, and the insights of cases that stumbled on the way as pitfalls.
func Template(cases []protocol.CaseBody) (name string, steps []protocol.SkillStep, sig []string, pitfalls []string) {
	sig = Consensus(cases)
	for _, t := range sig {
		text := "call " + t
		for i := len(cases) - 1; i >= 0; i-- {
			if a := argsOf(cases[i], t); a != "" {
				text += " with arguments like " + a
				break
			}
		}
		steps = append(steps, protocol.SkillStep{Tool: t, Text: clip(text, protocol.MaxSkillStepChars)})
		if len(steps) == protocol.MaxSkillSteps {
			break
		}
	}
	for i := len(cases) - 1; i >= 0 && len(pitfalls) < protocol.MaxSkillPitfalls; i-- {
		if ins := strings.TrimSpace(cases[i].Insight); ins != "" && !slices.Contains(pitfalls, ins) {
			pitfalls = append(pitfalls, clip(ins, protocol.MaxInsightChars))
		}
	}
	return Name(sig), steps, sig, pitfalls
}

// Consensus is the tool sequence most cases followed (ties go to the newest).
func Consensus(cases []protocol.CaseBody) []string {
	count := map[string]int{}
	last := map[string]int{}
	sigs := map[string][]string{}
	for i, c := range cases {
		s := Signature(c.Approach)
		k := strings.Join(s, "\x00")
		count[k]++
		last[k] = i
		sigs[k] = s
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if count[keys[i]] != count[keys[j]] {
			return count[keys[i]] > count[keys[j]]
		}
		return last[keys[i]] > last[keys[j]]
	})
	if len(keys) == 0 {
		return nil
	}
	return sigs[keys[0]]
}

// argsOf is the arguments of the case's last successful call of tool.
func argsOf(c protocol.CaseBody, tool string) string {
	for i := len(c.Approach) - 1; i >= 0; i-- {
		if s := c.Approach[i]; s.Tool == tool && s.OK && s.Args != "" && s.Args != "{}" {
			return clip(cases.ShowArgs(s.Args), 100)
		}
	}
	return ""
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,62}[a-z0-9]$`)

// Name is the name code gives a procedure: its tools in order.
func Name(sig []string) string {
	var parts []string
	for _, t := range sig {
		parts = append(parts, strings.ToLower(strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return '-'
		}, t)))
	}
	n := strings.Trim(strings.Join(parts, "-then-"), "-")
	if len(n) > protocol.MaxSkillName {
		n = strings.TrimRight(n[:protocol.MaxSkillName], "-")
	}
	if !nameRE.MatchString(n) {
		n = fmt.Sprintf("procedure-%d-steps", len(sig))
	}
	return n
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
