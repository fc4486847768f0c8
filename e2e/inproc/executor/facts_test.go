// Package executor_test runs the executor with memoryd beside it, in one process on a real NATS:
// what compaction offers to memory, and what a later session finds there.
package executor_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/llm/scripted"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

// The scripted model keeps the notes (the secret word, when the turns it is shown hold it) and
// answers the question from whatever its prompt holds: the conversation's summary, or a
// guideline retrieved from memory.
const script = `rules:
  - when: {system: "keep the notes of a conversation", any: "(?i)secret word is zebra"}
    reply: {text: "FACT (durable): The user's secret word is zebra."}
  - when: {system: "keep the notes of a conversation"}
    reply: {text: "NONE"}
  - when: {last: "(?i)what is my secret word", any: "zebra"}
    reply: {text: "Your secret word is zebra."}
  - when: {last: "(?i)what is my secret word"}
    reply: {text: "I do not know your secret word."}
  - reply: {text: "Noted. Here is a long and careful reply that restates the request, weighs a few options, lists the next steps one by one and closes with a summary, so that every turn of this conversation takes a fair share of the small context window of this test."}
`

// A fact the user states in a long conversation is offered to memory when compaction folds its
// turn: memoryd stores it (through the lesson gate) as a note of this agent, and a later, new
// session, which continues nothing, answers from it.
func TestCompactedFactsReachALaterSession(t *testing.T) {
	m := bustest.Start(t)
	roles := bustest.RunRoles(t, m)
	ctx := roles.Ctx
	ready := make(chan struct{})
	roles.GoReady("memoryd", ready, func(ctx context.Context) error {
		return memoryd.Run(ctx, memoryd.Deps{Conn: roles.Connect("memoryd"), Names: m.Names, Config: config.Default(),
			Embedder: embedtest.Hash{}, Ready: ready, Logger: slog.New(slog.DiscardHandler)})
	})

	s, err := scripted.Parse("facts.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Agent.Name = "assistant"
	cfg.Miner.Enabled = false
	cfg.LLM.ContextWindow, cfg.LLM.MaxTokens = 1200, 200
	x, err := executor.New(ctx, executor.Deps{Conn: roles.Connect("executor"), Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler),
		ID: "ex-facts", Backend: scripted.FromScript(s)})
	if err != nil {
		t.Fatal(err)
	}
	turn := func(id, prev, text string) (protocol.StepResult, []protocol.Event) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
		defer scancel()
		res := x.RunStep(sctx, protocol.Step{SessionID: id, StepID: "step-1", Agent: cfg.Agent.Name, Task: text, Previous: prev})
		var evs []protocol.Event
		err := trace.Follow(sctx, m.Conn.JS, m.Names, id, func(ev protocol.Event) bool {
			evs = append(evs, ev)
			return ev.Type != protocol.EvStepFinished
		})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Outcome.Succeeded() {
			t.Fatalf("%s: %s (%s)", id, res.Outcome, res.Reason)
		}
		return res, evs
	}

	messages := []string{"Hello, I need help with a report.", "Remember this: my secret word is zebra."}
	for i := len(messages); i < 8; i++ {
		messages = append(messages, fmt.Sprintf("Here is part %d of the data: %s", i+1, strings.Repeat("figures and notes ", 30)))
	}
	prev, offered := "", ""
	for i, text := range messages {
		id := fmt.Sprintf("chat-%d", i+1)
		_, evs := turn(id, prev, text)
		for _, ev := range evs {
			if ev.Type == protocol.EvDecision && ev.Attrs[protocol.AttrPurpose] == protocol.PurposeCompaction {
				offered = ev.Text
			}
		}
		prev = id
	}
	if !strings.Contains(offered, "offered 1 fact(s) of the folded turns to memory: added") {
		t.Fatalf("compaction's offer to memory: %q", offered)
	}

	res, evs := turn("later", "", "What is my secret word?")
	if res.FinalText != "Your secret word is zebra." {
		t.Fatalf("a later session answered %q, want the fact from memory", res.FinalText)
	}
	var found bool
	for _, ev := range evs {
		for _, g := range ev.Guidelines {
			found = found || (ev.Type == protocol.EvRetrieval && strings.Contains(g.Text, "zebra") && g.Source == protocol.SourceRemembered)
		}
	}
	if !found {
		t.Fatal("the later session's retrieval does not hold the remembered fact")
	}
}
