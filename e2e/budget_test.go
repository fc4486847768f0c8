package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The cacher agent: its agent.yaml sets a budget, and its model is a fake Anthropic API that
// caches prompts as the provider does. Its stable prompt is long enough to be cached, so nearly
// all of what it is billed as input after the first call is cache reads.
const cacherYAML = `
agent:
  name: cacher
  max_steps: 8
  budget:
    max_input_tokens: 3000
  system_prompt: |
$PROMPT
llm:
  provider: anthropic
  model: claude-sonnet-4-5
  base_url: $URL
  api_key_env: SKEIN_E2E_FAKE_ANTHROPIC_KEY
  max_retries: 0
tools:
  manifest_dirs: [$TOOLS]
  enabled: [echo]
memory:
  enabled: false
`

// agent.budget in agent.yaml reaches every session of the agent (the tighter of it and the
// task's budget), and cache writes and reads count toward max_input_tokens: the looping model's
// fresh input alone would never reach the limit within its step limit.
func TestAgentBudgetCountsCacheTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	fake := llmtest.NewAnthropic(t, llmtest.Script{Respond: func(llmtest.Request) llmtest.Reply {
		return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "echo", Args: map[string]any{"text": "once more"}}}}
	}})
	prompt := strings.Repeat("    Keep every answer short and exact, say which tool you used, and never guess a figure.\n", 75)
	body := strings.NewReplacer("$PROMPT", strings.TrimSuffix(prompt, "\n"), "$URL", fake.URL,
		"$TOOLS", filepath.Join(devtest.RepoRoot(t), "examples", "tools")).Replace(cacherYAML)
	cfg := filepath.Join(reachableTempDir(t), "agent.yaml")
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	url := natsServer(t)
	c := connect(t, url)
	env := []string{"SKEIN_HOME=" + t.TempDir(), "SKEIN_E2E_FAKE_ANTHROPIC_KEY=fake"}
	for _, role := range []string{"toolhost", "executor", "planner", "gateway"} {
		start(t, env, role, role, "--nats", url, "--config", cfg)
	}
	bustest.WaitAgent(t, c, meshNames, "cacher")
	bustest.WaitPullers(t, c, meshNames, "cacher", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	submit := func(id string, b *protocol.Budget) []protocol.Event {
		t.Helper()
		sessiontest.Submit(t, c, meshNames, protocol.SubmitRequest{SessionID: id, Task: "echo until told to stop", Agent: "cacher", Caller: "e2e", Budget: b})
		evs, err := sessiontest.Follow(ctx, c, meshNames, id)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	record := func(id string) protocol.Budget {
		t.Helper()
		s := sessiontest.Record(t, c, meshNames, id)
		if s.Budget == nil {
			t.Fatalf("session %s has no budget", id)
		}
		return *s.Budget
	}

	// No budget at submit: agent.yaml's applies, and the cache tokens reach it.
	evs := submit("cacher-1", nil)
	if b := record("cacher-1"); b != (protocol.Budget{MaxInputTokens: 3000}) {
		t.Fatalf("session budget %+v; want agent.yaml's max_input_tokens 3000", b)
	}
	term, _ := ending(t, "cacher-1", evs)
	if term.Outcome != protocol.OutcomeBudgetExceeded {
		t.Fatalf("outcome %s (%s); want budget_exceeded", term.Outcome, term.Reason)
	}
	var fresh, writes, reads, calls int64
	for _, ev := range evs {
		if ev.Type == protocol.EvModelCall && ev.Usage != nil {
			calls++
			fresh += ev.Usage.InputTokens
			writes += ev.Usage.CacheCreationInputTokens
			reads += ev.Usage.CacheReadInputTokens
		}
	}
	// The first call writes the cache, the second reads it; fresh input alone would not reach
	// the limit in the step limit's 8 calls.
	if calls != 2 || writes == 0 || reads == 0 || fresh*8 >= 3000 {
		t.Fatalf("%d calls: %d fresh input tokens, %d cache writes, %d cache reads; want 2 calls, a cached prompt and little fresh input", calls, fresh, writes, reads)
	}
	cached := writes + reads
	be := hasEvent(evs, protocol.EvBudget)
	if be == nil || be.Attrs["limit"] != protocol.LimitInputTokens || be.Attrs["max"] != "3000" ||
		be.Attrs["reached"] != strconv.FormatInt(fresh+cached, 10) || be.Attrs["scope"] != "cacher-1" {
		t.Fatalf("budget event %+v; want max_input_tokens reached %d (fresh + cache writes + cache reads) of 3000", be, fresh+cached)
	}
	t.Logf("%d calls: fresh %d, cache writes %d, reads %d: %s", calls, fresh, writes, reads, term.Reason)

	// A task's budget tightens agent.yaml's field by field, and never loosens it.
	evs = submit("cacher-2", &protocol.Budget{MaxInputTokens: 1_000_000, MaxTurns: 1})
	if b := record("cacher-2"); b != (protocol.Budget{MaxInputTokens: 3000, MaxTurns: 1}) {
		t.Fatalf("session budget %+v; want max_input_tokens 3000 (agent.yaml) and max_turns 1 (the task)", b)
	}
	if term, _ := ending(t, "cacher-2", evs); term.Outcome != protocol.OutcomeBudgetExceeded ||
		!strings.Contains(term.Reason, fmt.Sprintf("%s reached: 1 of 1", protocol.LimitTurns)) {
		t.Fatalf("outcome %s (%s); want budget_exceeded at max_turns 1", term.Outcome, term.Reason)
	}
}
