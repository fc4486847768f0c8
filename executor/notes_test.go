package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// The conversation's answers: filler that fills a small window within a few turns, and the one
// answer that needs turn 2. notesRules make the scripted model the notes extractor: it keeps
// the secret word only when the turns it is shown (or the notes kept so far) hold it.
const (
	notesRules = `  - when: {system: "keep the notes of a conversation", any: "(?i)secret word is zebra"}
    reply: {text: "FACT (durable): The user's secret word is zebra.\nQUESTION: Which colour to use for the chart?"}
  - when: {system: "keep the notes of a conversation"}
    reply: {text: "NONE"}
`
	chatRules = `  - when: {last: "(?i)what is my secret word", any: "zebra"}
    reply: {text: "Your secret word is zebra."}
  - when: {last: "(?i)what is my secret word"}
    reply: {text: "I do not know your secret word."}
  - reply: {text: "Noted. Here is a long and careful reply that restates the request, weighs a few options, lists the next steps one by one and closes with a summary, so that every turn of this conversation takes a fair share of the small context window of this test."}
`
)

// chatTurn runs one turn of a conversation: a step of session id that continues prev.
func chatTurn(t *testing.T, m *bustest.Mesh, x *Executor, id, prev, text string) (protocol.StepResult, []protocol.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res := x.RunStep(ctx, protocol.Step{SessionID: id, StepID: "step-1", Agent: x.d.Config.Agent.Name, Task: text, Previous: prev})
	if err := x.trace.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := trace.Read(ctx, m.Conn.JS, m.Names, id)
	if err != nil {
		t.Fatal(err)
	}
	return res, evs
}

// A fact the user gives in turn 2 is answerable in turn 12 after compaction has folded that turn
// away: the summary that replaces the folded turns keeps what the user said, extracted by the
// model (here the scripted one) or, when the model cannot answer in the asked form, by the
// rules. The extraction is a model call of the turn: traced with purpose compaction and counted
// in the step's usage. The system blocks, where the cache breakpoints sit, never change.
func TestCompactionKeepsWhatTheUserSaid(t *testing.T) {
	for _, c := range []struct{ name, script, by string }{
		{"model", "rules:\n" + notesRules + chatRules, "by model scripted"},
		{"rules", "rules:\n" + chatRules, "by rules (the model's answer was not in the asked form)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := bustest.Start(t)
			cfg := testConfig(t.TempDir())
			cfg.LLM.ContextWindow, cfg.LLM.MaxTokens = 1200, 200
			rec := &recorder{Backend: scriptBackend(t, c.script)}
			x := (&mesh{Mesh: m}).executor(t, cfg, rec)
			messages := []string{"Hello, I need help with a report.", "Remember this: my secret word is zebra.",
				"Let's use a bar chart for the totals.", "Which colour should the chart use?"}
			for i := len(messages); i < 11; i++ {
				messages = append(messages, fmt.Sprintf("Here is part %d of the data: %s", i+1, strings.Repeat("figures and notes ", 30)))
			}
			messages = append(messages, "What is my secret word?")
			prev := ""
			var compactions, notesCalls []protocol.Event
			var res protocol.StepResult
			for i, text := range messages {
				id := fmt.Sprintf("c-%s-%d", c.name, i+1)
				var evs []protocol.Event
				res, evs = chatTurn(t, m, x, id, prev, text)
				if !res.Outcome.Succeeded() {
					t.Fatalf("turn %d: %s (%s)", i+1, res.Outcome, res.Reason)
				}
				var sum protocol.Usage
				for _, ev := range evs {
					switch {
					case ev.Type == protocol.EvCompaction && strings.HasPrefix(ev.Reason, "summarized older turns"):
						compactions = append(compactions, ev)
					case ev.Type == protocol.EvModelCall && ev.Attrs[protocol.AttrPurpose] == protocol.PurposeCompaction:
						notesCalls = append(notesCalls, ev)
					}
					if ev.Type == protocol.EvModelCall && ev.Usage != nil {
						sum = sum.Add(*ev.Usage)
					}
				}
				if sum != res.Usage {
					t.Fatalf("turn %d: the step's usage %+v is not the sum of its model calls %+v", i+1, res.Usage, sum)
				}
				prev = id
			}
			if res.FinalText != "Your secret word is zebra." {
				t.Fatalf("turn 12 answered %q, want the secret word given in turn 2", res.FinalText)
			}
			if len(compactions) == 0 {
				t.Fatal("no turn was folded: the window is too large for the test")
			}
			for _, ev := range compactions {
				if !strings.Contains(ev.Reason, c.by) {
					t.Errorf("compaction %q: want notes kept %s", ev.Reason, c.by)
				}
			}
			if len(notesCalls) != len(compactions) {
				t.Fatalf("%d notes calls for %d folds", len(notesCalls), len(compactions))
			}
			for _, ev := range notesCalls {
				if ev.Usage == nil || ev.Usage.InputTokens == 0 || ev.Usage.OutputTokens == 0 {
					t.Fatalf("the notes call is not counted: %+v", ev)
				}
			}

			reqs := rec.requests()
			last := reqs[len(reqs)-1]
			var first []string
			for _, b := range last.Messages[0].Content {
				first = append(first, b.Text)
			}
			summary := strings.Join(first, "\n")
			for _, m := range last.Messages[1:] {
				for _, b := range m.Content {
					if b.Type == llm.BlockText && strings.Contains(b.Text, "secret word is zebra") {
						t.Fatalf("turn 2 is still in the transcript: nothing was folded away")
					}
				}
			}
			if !strings.Contains(summary, summaryHeader) || !strings.Contains(summary, "zebra") ||
				strings.Count(summary, summaryHeader) != 1 || !strings.Contains(summary, "- open question:") {
				t.Fatalf("first message of turn 12:\n%s\nwant one summary holding the secret word and the open question", summary)
			}
			// The stable part of the prompt, and so its cache breakpoints, is what it was.
			var chat []llm.Request
			for _, r := range reqs {
				if !strings.Contains(r.System[0].Text, "keep the notes") {
					chat = append(chat, r)
				}
			}
			for i, r := range chat {
				if len(r.System) != len(chat[0].System) || r.System[0] != chat[0].System[0] || !r.System[0].Cache {
					t.Fatalf("request %d: the system blocks changed", i)
				}
				if !r.Messages[len(r.Messages)-1].Cache {
					t.Fatalf("request %d: no breakpoint on the newest message", i)
				}
			}
		})
	}
}
