package executor

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/usage"
)

// A model the table does not know gets a conservative context window, and the log says so once,
// with the fix; a known model, or llm.context_window, gets its own window without a warning.
func TestUnknownModelGetsAWarningAndAConservativeWindow(t *testing.T) {
	m := bustest.Start(t)
	known, ok := usage.ModelLimits("claude-haiku-4-5")
	if !ok || known.ContextWindow <= usage.ConservativeWindow {
		t.Fatalf("table entry for claude-haiku-4-5: %+v %v", known, ok)
	}
	cases := []struct {
		name, model string
		window      int // llm.context_window
		want        int
		warns       bool
	}{
		{"unknown model", "mystery-model-9", 0, usage.ConservativeWindow, true},
		{"known model", "claude-haiku-4-5", 0, known.ContextWindow, false},
		{"unknown model with llm.context_window", "mystery-model-9", 50_000, 50_000, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.LLM.Model, cfg.LLM.ContextWindow = c.model, c.window
			var logs bytes.Buffer
			x := newExecutor(t, m, cfg, scriptBackend(t, "rules:\n  - reply: {text: ok}\n"), slog.New(slog.NewTextHandler(&logs, nil)))
			if got := x.contextWindow(); got != c.want {
				t.Errorf("context window %d; want %d", got, c.want)
			}
			warned := strings.Count(logs.String(), "model is not in the model table")
			if c.warns && (warned != 1 || !strings.Contains(logs.String(), "model=mystery-model-9") ||
				!strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "context_window=32768")) {
				t.Errorf("want one warning naming the model and the window assumed, got:\n%s", logs.String())
			}
			if !c.warns && warned != 0 {
				t.Errorf("unexpected warning:\n%s", logs.String())
			}
		})
	}
}

// smallWindowExecutor is an executor for a model with a window of 4000 tokens, whose requests
// rec keeps.
func smallWindowExecutor(t *testing.T) (*config.Config, *recorder, *Executor) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.LLM.ContextWindow = 4000
	rec := &recorder{Backend: scriptBackend(t, "rules:\n  - reply: {text: done}\n")}
	return cfg, rec, newExecutor(t, bustest.Start(t), cfg, rec, quiet())
}

// A task larger than the model's context window ends the step before any model call, with a
// reason that says what does not fit and what to do; a task that fits is run.
func TestTaskOverTheContextWindowIsRefusedBeforeAnyModelCall(t *testing.T) {
	cfg, rec, x := smallWindowExecutor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := x.RunStep(ctx, step(t, cfg, strings.Repeat("word ", 5000)))
	if res.Outcome != protocol.OutcomeFailed || !strings.Contains(res.Reason, "task does not fit the model's context window of 4000 tokens") ||
		!strings.Contains(res.Reason, "llm.context_window") {
		t.Fatalf("outcome %s (%s); want failed, naming the window and the fix", res.Outcome, res.Reason)
	}
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("the model was called %d times for a task it cannot take", n)
	}
	res = x.RunStep(ctx, protocol.Step{SessionID: "s-fits", StepID: "step-1", Agent: cfg.Agent.Name, Task: strings.Repeat("word ", 1000)})
	if res.Outcome != protocol.OutcomeSuccess || len(rec.requests()) != 1 {
		t.Fatalf("a task that fits: outcome %s (%s) after %d model calls", res.Outcome, res.Reason, len(rec.requests()))
	}
}

// A conversation's new message is held to the window too: compaction keeps the first task and
// the newest message whole, so one too large for the window is refused before any model call.
func TestMessageOverTheContextWindowIsRefusedBeforeAnyModelCall(t *testing.T) {
	cfg, rec, x := smallWindowExecutor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := x.payloads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := llm.EncodeTranscript(nil, []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Greet Ada"}}},
		{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "Hello, Ada!"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, protocol.TranscriptObject("s-first"), earlier); err != nil {
		t.Fatal(err)
	}
	res := x.RunStep(ctx, protocol.Step{SessionID: "s-next", StepID: "step-1", Agent: cfg.Agent.Name,
		Task: strings.Repeat("word ", 5000), Previous: "s-first"})
	if res.Outcome != protocol.OutcomeFailed || !strings.Contains(res.Reason, "does not fit the model's context window") {
		t.Fatalf("outcome %s (%s); want failed, naming the window", res.Outcome, res.Reason)
	}
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("the model was called %d times for a message it cannot take", n)
	}
}
