package planner

import (
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/protocol"
)

func TestParsePlan(t *testing.T) {
	good := "```json\n" + `{"steps":[{"id":"s1","instruction":" fetch ","depends_on":[]},{"id":"s_2","instruction":"use","depends_on":["s1"]}]}` + "\n```"
	plan, err := parsePlan(good, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].Instruction != "fetch" || plan[0].DependsOn != nil ||
		plan[1].StepID != "s_2" || strings.Join(plan[1].DependsOn, ",") != "s1" || plan[1].Status != protocol.StepPending {
		t.Fatalf("plan = %+v", plan)
	}

	step := func(id, instr string, deps ...string) string {
		q := func(s string) string { return `"` + s + `"` }
		var ds []string
		for _, d := range deps {
			ds = append(ds, q(d))
		}
		return `{"id":` + q(id) + `,"instruction":` + q(instr) + `,"depends_on":[` + strings.Join(ds, ",") + `]}`
	}
	doc := func(steps ...string) string { return `{"steps":[` + strings.Join(steps, ",") + `]}` }
	bad := map[string]string{
		"not JSON":          "Sure! Step one: fetch.",
		"text after":        doc(step("s1", "a")) + " hope this helps",
		"unknown field":     `{"steps":[{"id":"s1","instruction":"a","tool":"x"}]}`,
		"no steps":          `{"steps":[]}`,
		"too many":          doc(step("s1", "a"), step("s2", "b"), step("s3", "c")),
		"unsafe id":         doc(step("s.1", "a")),
		"empty id":          doc(step("", "a")),
		"long id":           doc(step(strings.Repeat("x", 33), "a")),
		"duplicate id":      doc(step("s1", "a"), step("s1", "b")),
		"empty instruction": doc(step("s1", "  ")),
		"forward reference": doc(step("s1", "a", "s2"), step("s2", "b")),
		"self reference":    doc(step("s1", "a", "s1")),
		"unknown reference": doc(step("s1", "a"), step("s2", "b", "zz")),
		"repeated dep":      doc(step("s1", "a"), step("s2", "b", "s1", "s1")),
	}
	for name, text := range bad {
		if plan, err := parsePlan(text, 2); err == nil {
			t.Errorf("%s: accepted %+v", name, plan)
		}
	}
}

func TestCombineAnswersWithSinks(t *testing.T) {
	plan := []protocol.PlanStep{
		{StepID: "a", Outcome: protocol.OutcomeSuccess, FinalText: "part a"},
		{StepID: "b", Outcome: protocol.OutcomeSuccessWithRecovery, FinalText: "part b"},
		{StepID: "c", DependsOn: []string{"a"}, Outcome: protocol.OutcomeSuccess, FinalText: " answer c "},
		{StepID: "d", DependsOn: []string{"b"}, Outcome: protocol.OutcomeIncomplete, FinalText: "answer d"},
	}
	out, text := combine(plan)
	if out != protocol.OutcomeIncomplete || text != "answer c\n\nanswer d" {
		t.Fatalf("combine = %s %q", out, text)
	}
	if out, text := combine(singleStepDone("only")); out != protocol.OutcomeSuccess || text != "only" {
		t.Fatalf("single step combine = %s %q", out, text)
	}
}

func singleStepDone(text string) []protocol.PlanStep {
	p := singleStep()
	p[0].Status, p[0].Outcome, p[0].FinalText = protocol.StepDone, protocol.OutcomeSuccess, text
	return p
}
