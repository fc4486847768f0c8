package miner

import (
	"regexp"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/protocol"
)

var (
	valueRE  = regexp.MustCompile(`--[A-Za-z][\w-]*|[\w.~-]*/[\w./~-]+|\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b`)
	quotedRE = regexp.MustCompile("\"([^\"\\s]{2,})\"|'([^'\\s]{2,})'|`([^`\\s]{2,})`")
	identRE  = regexp.MustCompile(`^[A-Za-z_]+$`)
)

// literals are the concrete values a guideline names (paths, flags, file names, quoted tokens):
// when a session's calls used none of them, it plainly followed an "avoid" guideline. Quoted
// plain words are left out, since they are usually argument names that every call carries.
func literals(text string, tools []string) []string {
	var out []string
	add := func(m string) {
		m = strings.Trim(m, "\"'`.,;:()")
		if len(m) < 2 || slices.Contains(tools, m) || slices.Contains(out, m) {
			return
		}
		out = append(out, m)
	}
	for _, m := range valueRE.FindAllString(text, -1) {
		add(m)
	}
	for _, sm := range quotedRE.FindAllStringSubmatch(text, -1) {
		for _, g := range sm[1:] {
			if g != "" && !identRE.MatchString(g) && !strings.ContainsAny(g, ":{}") {
				add(g)
			}
		}
	}
	return out
}

func toolsOf(g protocol.Guideline, calls []Call) []string {
	if len(g.Tools) > 0 {
		return g.Tools
	}
	var out []string
	for _, c := range calls {
		if strings.Contains(g.Text, c.Tool) && !slices.Contains(out, c.Tool) {
			out = append(out, c.Tool)
		}
	}
	return out
}

var wordSplit = regexp.MustCompile(`[^\pL\pN]+`)

// warnedAbout reports whether a failed call is the failure g warned about: same tool, and most
// of the error's words appear in the guideline.
func warnedAbout(g protocol.Guideline, tools []string, c Call) bool {
	if !slices.Contains(tools, c.Tool) {
		return false
	}
	text := strings.ToLower(g.Text)
	var words, hit int
	for _, w := range wordSplit.Split(strings.ToLower(realError(c.Result)), -1) {
		if len(w) < 3 {
			continue
		}
		words++
		if strings.Contains(text, w) {
			hit++
		}
	}
	return words == 0 || 2*hit >= words
}

// Feedback marks the guidelines a session retrieved: helpful when it succeeded, harmful when it
// failed with the very tool failure the guideline warned about, and followed when it succeeded
// and its tool calls plainly did what the guideline said (an avoid guideline's literals never
// appear in the calls of its tools; a pattern's tools all ran successfully).
func Feedback(s Session) protocol.FeedbackRequest {
	fb := protocol.FeedbackRequest{Agent: s.MemoryAgent(), SessionID: s.ID}
	ok := s.Outcome.Succeeded()
	for _, g := range s.Retrieved {
		tools := toolsOf(g, s.Calls)
		if ok {
			fb.Helpful = append(fb.Helpful, g.ID)
			if followed(g, tools, s.Calls) {
				fb.Followed = append(fb.Followed, g.ID)
			}
			continue
		}
		if g.Polarity != protocol.PolarityAvoid {
			continue
		}
		for _, c := range s.Calls {
			if c.Failed() && warnedAbout(g, tools, c) {
				fb.Harmful = append(fb.Harmful, g.ID)
				break
			}
		}
	}
	return fb
}

func followed(g protocol.Guideline, tools []string, calls []Call) bool {
	if len(tools) == 0 {
		return false
	}
	if g.Polarity == protocol.PolarityPattern {
		for _, t := range tools {
			if !slices.ContainsFunc(calls, func(c Call) bool { return c.Tool == t && !c.Failed() }) {
				return false
			}
		}
		return true
	}
	lits := literals(g.Text, tools)
	used := false
	for _, c := range calls {
		if !slices.Contains(tools, c.Tool) {
			continue
		}
		used = true
		if c.Failed() && warnedAbout(g, tools, c) {
			return false
		}
		for _, l := range lits {
			if strings.Contains(string(c.Args), l) {
				return false
			}
		}
	}
	return used
}
