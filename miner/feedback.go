package miner

import (
	"regexp"
	"slices"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory/cases"
	"github.com/skein-mesh/skein/pkg/memory/extract"
	"github.com/skein-mesh/skein/pkg/memory/skills"
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

// use is what a session did with a guideline it retrieved, read from its tool calls.
type use int

const (
	// unknown: none of the guideline's tools was called, so the trace cannot tell.
	unknown use = iota
	// followed: the calls did what it says (an avoid guideline: the last call of its tools
	// neither used a value it names nor failed the way it warned; a pattern: a call of its
	// tools used a value it names and succeeded, or, naming none, each of its tools ran
	// successfully).
	followed
	// followedIntoFailure: the calls did what it says and failed all the same.
	followedIntoFailure
	// ignored: the calls went against it (the last call of an avoid guideline's tools used what
	// it warned about or failed as it warned; a pattern's tools ran without the values it
	// names, or not all of them ran).
	ignored
)

// useOf reads how the session used g.
func useOf(g protocol.Guideline, tools []string, calls []Call) use {
	var mine []Call
	for _, c := range calls {
		if slices.Contains(tools, c.Tool) {
			mine = append(mine, c)
		}
	}
	if len(tools) == 0 || len(mine) == 0 {
		return unknown
	}
	lits := literals(g.Text, tools)
	usesLiteral := func(c Call) bool {
		return slices.ContainsFunc(lits, func(l string) bool { return strings.Contains(string(c.Args), l) })
	}
	if g.Polarity == protocol.PolarityAvoid {
		// The last call decides: a session that hit the warned failure and then did as the
		// guideline says followed it in the end.
		last := mine[len(mine)-1]
		switch {
		case usesLiteral(last) || last.Failed() && warnedAbout(g, tools, last):
			return ignored
		case last.Failed():
			return followedIntoFailure
		}
		return followed
	}
	if len(lits) > 0 {
		var using []Call
		for _, c := range mine {
			if usesLiteral(c) {
				using = append(using, c)
			}
		}
		switch {
		case len(using) == 0:
			return ignored
		case slices.ContainsFunc(using, func(c Call) bool { return !c.Failed() }):
			return followed
		}
		return followedIntoFailure
	}
	ran, succeeded := 0, 0
	for _, t := range tools {
		if slices.ContainsFunc(mine, func(c Call) bool { return c.Tool == t }) {
			ran++
		}
		if slices.ContainsFunc(mine, func(c Call) bool { return c.Tool == t && !c.Failed() }) {
			succeeded++
		}
	}
	switch {
	case succeeded == len(tools):
		return followed
	case ran == len(tools):
		return followedIntoFailure
	}
	return ignored
}

// Feedback marks the guidelines a session retrieved, from how its tool calls used each (useOf):
//
//   - followed, in a session that succeeded: helpful and followed (two helpful marks), echo;
//   - followed into a failure: harmful, fizzle (whatever the session's outcome);
//   - ignored: fizzle, and no helpful mark even if the session succeeded;
//   - none of its tools called: one helpful mark when the session succeeded (it was there when
//     things went right), and its utility is left alone.
//
// A guideline the session ignored and then failed exactly as it warned is not harmful: the
// failure confirms it (the miner mines that failure again, which counts for the guideline).
func Feedback(s Session) protocol.FeedbackRequest {
	fb := protocol.FeedbackRequest{Agent: s.MemoryAgent(), SessionID: s.ID}
	ok := s.Outcome.Succeeded()
	for _, g := range s.Retrieved {
		switch useOf(g, toolsOf(g, s.Calls), s.Calls) {
		case followed:
			if ok {
				fb.Helpful = append(fb.Helpful, g.ID)
				fb.Followed = append(fb.Followed, g.ID)
				fb.Echo = append(fb.Echo, g.ID)
			}
		case followedIntoFailure:
			fb.Harmful = append(fb.Harmful, g.ID)
			fb.Fizzle = append(fb.Fizzle, g.ID)
		case ignored:
			fb.Fizzle = append(fb.Fizzle, g.ID)
		case unknown:
			if ok {
				fb.Helpful = append(fb.Helpful, g.ID)
			}
		}
	}
	// A worked example was followed when the session's calls took its way (their tool
	// sequences alike, as a case follows a skill); skills learn from the session's case instead.
	sig := skills.Signature(cases.Approach(extract.Trajectory{Turns: []extract.Turn{{Calls: extractCalls(s.Calls)}}}))
	for _, x := range s.Recalled {
		if x.Case == nil {
			continue
		}
		switch {
		case len(sig) == 0:
		case skills.Similar(sig, skills.Signature(x.Case.Approach)) < followedFloor:
			fb.Fizzle = append(fb.Fizzle, x.ID)
		case ok:
			fb.Helpful = append(fb.Helpful, x.ID)
			fb.Echo = append(fb.Echo, x.ID)
		default:
			fb.Harmful = append(fb.Harmful, x.ID)
			fb.Fizzle = append(fb.Fizzle, x.ID)
		}
	}
	return fb
}

// followedFloor is how alike a session's tool sequence and a worked example's must be for the
// session to have followed it.
const followedFloor = 0.6
