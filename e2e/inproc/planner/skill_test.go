package planner_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/embed/minilm"
	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/planner"
)

// The planning model plans from the skill only when the procedure is in its prompt; without it
// the same task gets the one-step answer.
const skillScript = `
rules:
  - when: {system: "^skein-planner:", last: "(?s)Make the sales report for June.*proven procedure.*monthly-sales-report.*1. Read the month's sales CSV.*2. Build the report"}
    reply:
      text: |
        {"steps": [
          {"id": "read", "instruction": "Read data/june.csv", "depends_on": []},
          {"id": "report", "instruction": "Build the June report, the date as DD/MM/YYYY", "depends_on": ["read"]}
        ]}
  - when: {system: "^skein-planner:"}
    reply:
      text: '{"steps": [{"id": "s1", "instruction": "Make the sales report for June", "depends_on": []}]}'
  - when: {last: "Your part of the plan: Read data/june.csv"}
    reply: {text: "rows=30"}
  - when: {last: "Your part of the plan: Build the June report"}
    reply: {text: "report r-6"}
  - when: {last: "Make the sales report for June"}
    reply: {text: "done in one step"}
`

// TestPlannerUsesAMatureSkill: memoryd holds a mature skill for monthly sales reports (and a
// candidate one for the same tasks); the planner asks for the skill that fits the task, gives
// the mature one's procedure to the planning model as the plan's template, and says so in the
// trace. The candidate skill is never a template.
func TestPlannerUsesAMatureSkill(t *testing.T) {
	emb, err := minilm.Open(minilm.Options{})
	if err != nil {
		devtest.Missing(t, fmt.Sprintf("all-MiniLM-L6-v2 (%v)", err))
	}
	t.Cleanup(func() { emb.Close() })
	r := startRig(t, planner.ModeAuto, skillScript, func(c *config.Config) { c.Memory.Enabled = true })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.roles.Go("memoryd", func(ctx context.Context) error {
		return memoryd.Run(ctx, memoryd.Deps{Conn: r.roles.Connect("memoryd"), Names: r.m.Names, Config: r.cfg, Embedder: emb, Logger: slog.New(slog.DiscardHandler)})
	})
	mem := memoryd.Client{NC: r.m.Conn.NC, Names: r.m.Names, PerTry: 10 * time.Second}
	skill := func(id, name, maturity string, conf float64) memory.Entry {
		return memory.Entry{ID: id, Agent: agent, Kind: memory.KindSkill, Text: name + ": Make the sales report for a month",
			Polarity: protocol.PolarityPattern, Tools: []string{"csv_read", "report_tool"}, Source: memory.SourceMiner,
			Skill: &protocol.SkillBody{Name: name, Version: 2, Maturity: maturity, Confidence: conf, Confirmed: 5, Support: 4.3,
				Signature: []string{"csv_read", "report_tool"},
				Steps:     []protocol.SkillStep{{Tool: "csv_read", Text: "Read the month's sales CSV"}, {Tool: "report_tool", Text: "Build the report, the date as DD/MM/YYYY"}}}}
	}
	var rep *protocol.MemoryImportReply
	poll.Eventually(t, 30*time.Second, "memoryd imports the skills", func() error {
		var err error
		rep, err = mem.Import(ctx, protocol.MemoryImportRequest{Entries: []memory.Entry{
			skill("k-mature", "monthly-sales-report", protocol.SkillMature, 0.84),
			skill("k-young", "monthly-sales-draft", protocol.SkillCandidate, 0.6),
		}})
		return err
	})
	if rep.Imported != 2 {
		t.Fatalf("import skills: %+v", rep)
	}
	const sid = "s-skill"
	evs := r.runToEnd(t, sid, "Make the sales report for June from data/june.csv")
	var used *protocol.Event
	for _, ev := range sessiontest.Of(evs, protocol.EvDecision, protocol.RolePlanner) {
		if ev.Attrs["decision"] == "skill_template" {
			used = &ev
		}
	}
	if used == nil || used.Attrs["skill"] != "k-mature" || len(used.Recalled) != 1 || !strings.Contains(used.Text, "monthly-sales-report v2") {
		t.Fatalf("no decision to plan from the mature skill: %+v", sessiontest.Of(evs, protocol.EvDecision, ""))
	}
	plan := sessiontest.Only(t, evs, protocol.EvPlan, protocol.RolePlanner)
	if len(plan.Plan) != 2 || plan.Plan[0].StepID != "read" || plan.Plan[1].StepID != "report" {
		t.Fatalf("plan %+v: want the skill's two steps", plan.Plan)
	}
	if end := sessiontest.Only(t, evs, protocol.EvFinal, protocol.RolePlanner); end.Outcome != protocol.OutcomeSuccess || !strings.Contains(end.Text, "report r-6") {
		t.Fatalf("end %+v", end)
	}
}
