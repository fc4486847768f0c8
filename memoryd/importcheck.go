package memoryd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/ingest"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// Bounds on imported entries: an import writes strategic memory that every later session puts
// in its prompt, so nothing in it is taken on trust.
const (
	maxImportTools    = 64
	maxImportSessions = 10000
	maxImportMined    = 10000
	maxImportCount    = 1 << 30
	maxMinedKeyLen    = 256
)

// checkImport validates every field of an imported entry and fills the defaults. The text is
// redacted (the lesson gate then judges it, in importOne); one over the guideline length cap is
// refused (not cut: a cut guideline can say the opposite of the whole).
func checkImport(e *memory.Entry, now time.Time) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := protocol.IDAgent.Check(e.Agent); err != nil {
		bad("%v", err)
	}
	if len(e.Text) > retrieve.MaxGuidelineChars {
		bad("text is %d bytes, at most %d", len(e.Text), retrieve.MaxGuidelineChars)
	} else if e.Text = strings.TrimSpace(redact.String(e.Text)); e.Text == "" {
		bad("text is empty")
	}
	switch e.Kind {
	case "", memory.KindGuideline:
		if e.Case != nil || e.Skill != nil {
			bad("a guideline carries no case or skill body")
		}
	case memory.KindCase:
		if e.Case == nil {
			bad("a case needs its case body")
		} else if err := ingest.CheckCase(protocol.CaseCandidate{Key: "import", Case: *e.Case}); err != nil {
			bad("%v", err)
		} else {
			e.Text = e.Case.Intent
		}
		e.Skill = nil
	case memory.KindSkill:
		if e.Skill == nil {
			bad("a skill needs its skill body")
		} else if err := checkSkill(e.Skill); err != nil {
			bad("%v", err)
		}
		e.Case = nil
	default:
		bad("kind must be guideline, case or skill, got %q", e.Kind)
	}
	if e.Polarity != protocol.PolarityAvoid && e.Polarity != protocol.PolarityPattern {
		bad("polarity must be avoid or pattern, got %q", e.Polarity)
	}
	if e.Tier == "" {
		e.Tier = protocol.TierTactical
	}
	if e.Tier != protocol.TierTactical && e.Tier != protocol.TierStrategic {
		bad("tier must be tactical or strategic, got %q", e.Tier)
	}
	if e.ID != "" {
		if err := protocol.IDMemory.Check(e.ID); err != nil {
			bad("%v", err)
		}
	}
	if len(e.Tools) > maxImportTools {
		bad("%d tools, at most %d", len(e.Tools), maxImportTools)
	}
	for _, t := range e.Tools {
		if err := protocol.IDTool.Check(t); err != nil {
			bad("tools: %v", err)
			break
		}
	}
	if len(e.Sessions) > maxImportSessions {
		bad("%d sessions, at most %d", len(e.Sessions), maxImportSessions)
	}
	for _, s := range e.Sessions {
		if err := protocol.IDSession.Check(s); err != nil {
			bad("sessions: %v", err)
			break
		}
	}
	if len(e.History) > protocol.MaxHistory || len(e.Supersedes) > protocol.MaxHistory || len(e.Marks) > protocol.MaxMarks {
		bad("history, supersedes or marks too long: at most %d, %d and %d", protocol.MaxHistory, protocol.MaxHistory, protocol.MaxMarks)
	}
	if len(e.Mined) > maxImportMined {
		bad("%d mined keys, at most %d", len(e.Mined), maxImportMined)
	}
	for _, m := range e.Mined {
		if m == "" || len(m) > maxMinedKeyLen {
			bad("mined: a key is empty or over %d bytes", maxMinedKeyLen)
			break
		}
	}
	for name, n := range map[string]int{"hits": e.Hits, "helpful": e.Helpful, "harmful": e.Harmful} {
		if n < 0 || n > maxImportCount {
			bad("%s must be between 0 and %d, got %d", name, maxImportCount, n)
		}
	}
	switch e.Source {
	case "":
		e.Source = memory.SourceHuman
	case memory.SourceHuman, memory.SourceMiner, memory.SourceSubagent, memory.SourceRemembered:
	default:
		bad("source must be human, miner, subagent or remembered, got %q", e.Source)
	}
	switch e.Status {
	case "":
		e.Status = memory.StatusActive
	case memory.StatusActive, memory.StatusRetired, memory.StatusQuarantined:
	case memory.StatusSuperseded:
		if err := protocol.IDMemory.Check(e.SupersededBy); err != nil {
			bad("a superseded entry needs superseded_by, an entry id: %v", err)
		}
	default:
		bad("status must be active, superseded, retired or quarantined, got %q", e.Status)
	}
	if e.SupersededBy != "" && e.Status != memory.StatusSuperseded {
		bad("superseded_by is set on an entry whose status is %q", e.Status)
	}
	for name, t := range map[string]time.Time{"created": e.Created, "updated": e.Updated, "last_used": e.LastUsed} {
		if t.After(now.Add(24 * time.Hour)) {
			bad("%s is in the future (%s)", name, t.Format(time.RFC3339))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if e.Created.IsZero() {
		e.Created = now
	}
	if e.Updated.IsZero() {
		e.Updated = now
	}
	return nil
}

// checkSkill validates an imported skill's body against protocol's bounds.
func checkSkill(k *protocol.SkillBody) error {
	switch {
	case k.Name == "" || len(k.Name) > protocol.MaxSkillName:
		return fmt.Errorf("skill name must be 1 to %d bytes", protocol.MaxSkillName)
	case len(k.Steps) == 0 || len(k.Steps) > protocol.MaxSkillSteps:
		return fmt.Errorf("skill has %d steps, want 1 to %d", len(k.Steps), protocol.MaxSkillSteps)
	case len(k.Preconditions) > protocol.MaxSkillPre || len(k.Pitfalls) > protocol.MaxSkillPitfalls:
		return fmt.Errorf("skill has more than %d preconditions or %d pitfalls", protocol.MaxSkillPre, protocol.MaxSkillPitfalls)
	case len(k.Cases) > protocol.MaxSkillCases || len(k.Signature) > protocol.MaxCaseSteps:
		return fmt.Errorf("skill lists more than %d cases or %d signature tools", protocol.MaxSkillCases, protocol.MaxCaseSteps)
	case k.Confidence < 0 || k.Confidence > 1 || k.Support < 0 || k.Against < 0 || k.Confirmed < 0 || k.Weakened < 0 || k.Version < 0:
		return errors.New("skill confidence must be in [0, 1] and its counts not negative")
	case k.Maturity != protocol.SkillCandidate && k.Maturity != protocol.SkillMature:
		return fmt.Errorf("skill maturity must be %s or %s, got %q", protocol.SkillCandidate, protocol.SkillMature, k.Maturity)
	}
	for i, st := range k.Steps {
		if st.Tool != "" && !protocol.IDTool.Valid(st.Tool) {
			return fmt.Errorf("skill step %d: tool %q is not a tool name", i+1, st.Tool)
		}
		if st.Text == "" || len(st.Text) > protocol.MaxSkillStepChars {
			return fmt.Errorf("skill step %d: text must be 1 to %d bytes", i+1, protocol.MaxSkillStepChars)
		}
	}
	for _, p := range append(slices.Clone(k.Preconditions), k.Pitfalls...) {
		if p == "" || len(p) > protocol.MaxInsightChars {
			return fmt.Errorf("a skill precondition or pitfall must be 1 to %d bytes", protocol.MaxInsightChars)
		}
	}
	return nil
}
