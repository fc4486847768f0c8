// Package profile keeps an agent's standing profile: its identity and rules, a Markdown file the
// operator writes beside agent.yaml (agent.profile), and the patches learning adds to it.
//
// Learning never writes the file. What it learns is kept in a ledger beside it (the profile's
// name + ".patches.json"): the signals seen so far with their evidence, and every patch ever
// proposed with its evidence, unified diff, token count, status and history. The profile an
// executor reads (Render) is the file with the applied patches overlaid, each a rule added to a
// section, so a human edit to the file is never overwritten, and reverting a patch gives back
// exactly the profile before it. A patch is proposed only when its signal passes four gates
// (persistence, directedness, evidence strength, novelty: see Propose), then the lesson gate
// (pkg/memory/gate), then the size bounds.
package profile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/skein-mesh/skein/pkg/tokenize"
)

// Status is where a patch stands.
type Status string

const (
	Pending     Status = "pending"     // waits for `skein profile apply|reject`
	Applied     Status = "applied"     // part of the profile
	Rejected    Status = "rejected"    // a reviewer said no; never proposed again
	Reverted    Status = "reverted"    // was applied, rolled back; never proposed again
	Quarantined Status = "quarantined" // the lesson gate held it back; cannot be applied
	Refused     Status = "refused"     // over a size bound; can be applied once it fits
)

// Bounds of the ledger: signals waiting for evidence, patches kept, quotes per signal, history
// events per patch. Applied patches are bounded by the profile's token budget instead.
const (
	MaxSignals  = 256
	MaxPatches  = 256
	MaxQuotes   = 8
	MaxHistory  = 32
	MaxQuoteLen = 240
	// MinQuoteLen is the shortest quote that counts as evidence: shorter text matches anywhere.
	MinQuoteLen = 12
)

// DefaultSection is the section learned rules go to.
const DefaultSection = "Learned rules"

// Quote is one piece of evidence: text quoted verbatim from a call of Tool in Session.
type Quote struct {
	Session string `json:"session"`
	Tool    string `json:"tool"`
	Text    string `json:"text"`
}

// Event is one change of a patch.
type Event struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	Reason string    `json:"reason,omitempty"`
}

// Signal is a candidate rule seen in the agent's sessions, collecting evidence until it passes
// the gates (or is proposed).
type Signal struct {
	Key      string    `json:"key"`
	Rule     string    `json:"rule"`
	Tools    []string  `json:"tools"`
	Evidence []Quote   `json:"evidence"`
	Seen     time.Time `json:"seen"`
}

// Patch is a proposed change of the profile: Rule added to Section.
type Patch struct {
	ID       string   `json:"id"`
	Key      string   `json:"key"`
	Section  string   `json:"section"`
	Rule     string   `json:"rule"`
	Tools    []string `json:"tools"`
	Evidence []Quote  `json:"evidence"`
	// Diff is the unified diff of the rendered profile when the patch was proposed.
	Diff    string  `json:"diff"`
	Tokens  int     `json:"tokens"`
	Status  Status  `json:"status"`
	Reason  string  `json:"reason,omitempty"`
	History []Event `json:"history"`
	// Order is when it was applied (the overlay applies patches in this order).
	Order int `json:"order,omitempty"`
}

// Ledger is what learning knows of one profile.
type Ledger struct {
	Signals []Signal `json:"signals"`
	Patches []Patch  `json:"patches"`
	// Next numbers applications, so the overlay order survives a revert and re-apply.
	Next int `json:"next"`
}

// Limits bound a profile (config agent.profile_learning).
type Limits struct {
	// Budget is the tokens of the whole rendered profile; PatchBudget of one patch's rule.
	Budget, PatchBudget int
	// MinSessions is how many distinct sessions a signal's evidence must come from.
	MinSessions int
	// AutoApply applies a patch that passes every gate; otherwise it waits for a review.
	AutoApply bool
	Section   string
}

func (l Limits) section() string {
	if l.Section == "" {
		return DefaultSection
	}
	return l.Section
}

// Find returns the patch with id (nil when there is none).
func (l *Ledger) Find(id string) *Patch {
	for i := range l.Patches {
		if l.Patches[i].ID == id {
			return &l.Patches[i]
		}
	}
	return nil
}

func (l *Ledger) byKey(key string) *Patch {
	for i := range l.Patches {
		if l.Patches[i].Key == key {
			return &l.Patches[i]
		}
	}
	return nil
}

// Observe adds a signal's evidence from one session: quotes are merged by (session, text), at
// most MaxQuotes kept (the newest), and the ledger keeps at most MaxSignals signals (the least
// recently seen go first). A signal already proposed collects nothing.
func (l *Ledger) Observe(s Signal, now time.Time) {
	if l.byKey(s.Key) != nil {
		return
	}
	i := slices.IndexFunc(l.Signals, func(x Signal) bool { return x.Key == s.Key })
	if i < 0 {
		l.Signals = append(l.Signals, Signal{Key: s.Key})
		i = len(l.Signals) - 1
	}
	cur := &l.Signals[i]
	cur.Rule, cur.Tools, cur.Seen = s.Rule, s.Tools, now
	for _, q := range s.Evidence {
		if !slices.Contains(cur.Evidence, q) {
			cur.Evidence = append(cur.Evidence, q)
		}
	}
	if n := len(cur.Evidence); n > MaxQuotes {
		cur.Evidence = slices.Clone(cur.Evidence[n-MaxQuotes:])
	}
	if len(l.Signals) > MaxSignals {
		slices.SortStableFunc(l.Signals, func(a, b Signal) int { return b.Seen.Compare(a.Seen) })
		l.Signals = l.Signals[:MaxSignals]
	}
}

func (l *Ledger) dropSignal(key string) {
	l.Signals = slices.DeleteFunc(l.Signals, func(s Signal) bool { return s.Key == key })
}

// add records a new patch, keeping at most MaxPatches: when full, the oldest decided patch that
// is not applied goes.
func (l *Ledger) add(p Patch) {
	l.Patches = append(l.Patches, p)
	for len(l.Patches) > MaxPatches {
		i := slices.IndexFunc(l.Patches, func(p Patch) bool { return p.Status != Applied && p.Status != Pending })
		if i < 0 {
			i = slices.IndexFunc(l.Patches, func(p Patch) bool { return p.Status != Applied })
		}
		if i < 0 {
			break
		}
		l.Patches = slices.Delete(l.Patches, i, i+1)
	}
}

func (p *Patch) record(now time.Time, action, reason string) {
	p.History = append(p.History, Event{At: now, Action: action, Reason: reason})
	if n := len(p.History); n > MaxHistory {
		p.History = slices.Clone(p.History[n-MaxHistory:])
	}
}

// Render is the profile an executor reads: text (the file) with the applied patches overlaid in
// the order they were applied. A patch whose rule the file already states (a human wrote it in)
// adds nothing.
func Render(text string, l Ledger) string {
	applied := slices.Clone(l.Patches)
	applied = slices.DeleteFunc(applied, func(p Patch) bool { return p.Status != Applied })
	slices.SortStableFunc(applied, func(a, b Patch) int { return a.Order - b.Order })
	out := strings.TrimRight(text, "\n")
	for _, p := range applied {
		out = overlay(out, p.Section, p.Rule)
	}
	return out
}

// overlay adds "- rule" at the end of section (a "## section" heading), or a new section at the
// end when the profile has none.
func overlay(text, section, rule string) string {
	if states(text, rule) {
		return text
	}
	lines := strings.Split(text, "\n")
	start := -1
	for i, ln := range lines {
		if h, ok := heading(ln); ok && strings.EqualFold(h, section) {
			start = i
			break
		}
	}
	item := "- " + rule
	if start < 0 {
		if strings.TrimSpace(text) == "" {
			return "## " + section + "\n" + item
		}
		return text + "\n\n## " + section + "\n" + item
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if _, ok := heading(lines[i]); ok {
			end = i
			break
		}
	}
	last := start
	for i := start + 1; i < end; i++ {
		if strings.TrimSpace(lines[i]) != "" {
			last = i
		}
	}
	return strings.Join(slices.Concat(lines[:last+1], []string{item}, lines[last+1:]), "\n")
}

func heading(line string) (string, bool) {
	t := strings.TrimSpace(line)
	if !strings.HasPrefix(t, "#") {
		return "", false
	}
	return strings.TrimSpace(strings.TrimLeft(t, "#")), true
}

// states reports whether text already says rule: a line holding it, or a line sharing at least
// 60% of their words.
func states(text, rule string) bool {
	r := words(rule)
	if len(r) == 0 {
		return true
	}
	for _, ln := range strings.Split(text, "\n") {
		w := words(ln)
		if len(w) == 0 {
			continue
		}
		if strings.Contains(strings.ToLower(ln), strings.ToLower(strings.TrimSpace(rule))) || jaccard(r, w) >= 0.6 {
			return true
		}
	}
	return false
}

func words(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r == '_' || r == '-' || r == '/' || r == '.' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127)
	}) {
		out[strings.Trim(w, ".-/")] = true
	}
	delete(out, "")
	return out
}

func jaccard(a, b map[string]bool) float64 {
	in := 0
	for w := range a {
		if b[w] {
			in++
		}
	}
	return float64(in) / float64(len(a)+len(b)-in)
}

// Diff is the unified diff from before to after.
func Diff(before, after string) string {
	d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(before + "\n"), B: difflib.SplitLines(after + "\n"),
		FromFile: "profile", ToFile: "profile (patched)", Context: 2,
	})
	return d
}

func patchID(key string) string {
	h := sha256.Sum256([]byte("profile\x00" + key))
	return "p-" + hex.EncodeToString(h[:5])
}

// fits checks the size bounds of adding p to the profile that text and l render.
func fits(text string, l Ledger, p Patch, lim Limits) error {
	if lim.PatchBudget > 0 && p.Tokens > lim.PatchBudget {
		return fmt.Errorf("the rule is %d tokens, over the patch budget of %d (agent.profile_learning.patch_tokens)", p.Tokens, lim.PatchBudget)
	}
	if lim.Budget > 0 {
		q := p
		q.Status, q.Order = Applied, l.Next+1
		l.Patches = append(slices.Clone(l.Patches), q)
		if n := tokenize.Count(Render(text, l)); n > lim.Budget {
			return fmt.Errorf("the profile would be %d tokens, over its budget of %d (agent.profile_learning.max_tokens)", n, lim.Budget)
		}
	}
	return nil
}

// Apply applies the pending (or refused, once it fits) patch id.
func (l *Ledger) Apply(text, id string, lim Limits, now time.Time, reason string) error {
	p := l.Find(id)
	if p == nil {
		return fmt.Errorf("no patch %s", id)
	}
	if p.Status != Pending && p.Status != Refused {
		return fmt.Errorf("patch %s is %s; only a pending or refused patch can be applied", id, p.Status)
	}
	if err := fits(text, *l, *p, lim); err != nil {
		return fmt.Errorf("patch %s: %w", id, err)
	}
	l.Next++
	p.Status, p.Reason, p.Order = Applied, "", l.Next
	p.record(now, "applied", reason)
	return nil
}

// Reject turns down the pending patch id; its signal is not proposed again.
func (l *Ledger) Reject(id string, now time.Time, reason string) error {
	p := l.Find(id)
	if p == nil {
		return fmt.Errorf("no patch %s", id)
	}
	if p.Status != Pending && p.Status != Refused {
		return fmt.Errorf("patch %s is %s; only a pending or refused patch can be rejected (revert an applied one)", id, p.Status)
	}
	p.Status, p.Reason = Rejected, reason
	p.record(now, "rejected", reason)
	return nil
}

// Revert rolls back the applied patch id: the profile renders as it did before it.
func (l *Ledger) Revert(id string, now time.Time, reason string) error {
	p := l.Find(id)
	if p == nil {
		return fmt.Errorf("no patch %s", id)
	}
	if p.Status != Applied {
		return fmt.Errorf("patch %s is %s; only an applied patch can be reverted", id, p.Status)
	}
	p.Status, p.Reason, p.Order = Reverted, reason, 0
	p.record(now, "reverted", reason)
	return nil
}
