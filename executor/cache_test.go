package executor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/memory/profile"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tokenize"
)

const (
	strategicRule = "Check the currency of affected invoices before reading code."
	tacticalRule  = "query_db: the invoices table has no vat column; use invoice_lines."
)

// profileRules is the profile's rules section once learning applied a patch to it.
const profileRules = "## Rules\n- Quote amounts in DKK.\n- lookup: pass country codes, not names."

// writeProfile writes an agent profile and applies one learned patch to it.
func writeProfile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.md")
	if err := os.WriteFile(path, []byte("# Invoice auditor\nYou audit invoices.\n\n## Rules\n- Quote amounts in DKK.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := profile.Update(path, func(text string, l *profile.Ledger) error {
		l.Patches = append(l.Patches, profile.Patch{ID: "p-1", Key: "k", Section: "Rules", Rule: "lookup: pass country codes, not names.",
			Status: profile.Pending})
		return l.Apply(text, "p-1", profile.Limits{Budget: 500, PatchBudget: 60}, time.Now(), "test")
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeMemoryd answers retrievals with one strategic and one tactical guideline.
func fakeMemoryd(t *testing.T, m *mesh) {
	t.Helper()
	sub, err := m.Conn.NC.Subscribe(m.Names.Memory(protocol.MemRetrieve), func(msg *nats.Msg) {
		rep := protocol.RetrieveReply{Guidelines: []protocol.Guideline{
			{ID: "g-strategic", Text: strategicRule, Tier: protocol.TierStrategic, Polarity: protocol.PolarityPattern, Score: 0.9},
			{ID: "g-tactical", Text: tacticalRule, Tier: protocol.TierTactical, Polarity: protocol.PolarityAvoid, Tools: []string{"query_db"}, Score: 0.8},
		}}
		data, _ := protocol.Marshal(&rep)
		_ = msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// wireRequest is the part of a Messages API request body the layout assertions read.
type wireRequest struct {
	System   []map[string]json.RawMessage `json:"system"`
	Tools    []map[string]json.RawMessage `json:"tools"`
	Messages []struct {
		Role    string                       `json:"role"`
		Content []map[string]json.RawMessage `json:"content"`
	} `json:"messages"`
}

func decodeWire(t *testing.T, body []byte) wireRequest {
	t.Helper()
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		t.Fatalf("request body: %v", err)
	}
	return w
}

func marked(b map[string]json.RawMessage) bool { _, ok := b["cache_control"]; return ok }

func text(b map[string]json.RawMessage) string {
	var s string
	_ = json.Unmarshal(b["text"], &s)
	return s
}

// withoutMarks is a block as the provider hashes it: everything but cache_control.
func withoutMarks(blocks []map[string]json.RawMessage) string {
	var out []map[string]json.RawMessage
	for _, b := range blocks {
		c := map[string]json.RawMessage{}
		for k, v := range b {
			if k != "cache_control" {
				c[k] = v
			}
		}
		out = append(out, c)
	}
	s, _ := json.Marshal(out)
	return string(s)
}

// stableTokens counts tools and system as the provider does: the prefix every call shares.
func stableTokens(w wireRequest) int64 {
	n := 0
	for _, t := range w.Tools {
		var name, desc string
		_ = json.Unmarshal(t["name"], &name)
		_ = json.Unmarshal(t["description"], &desc)
		n += tokenize.Count(name) + tokenize.Count(desc) + tokenize.Count(string(t["input_schema"]))
	}
	for _, s := range w.System {
		n += tokenize.Count(text(s))
	}
	return int64(n)
}

var volatile = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}|\b\d{2}:\d{2}:\d{2}\b`)

// Two sessions of the multi-step scenario against the cache-computing Anthropic fake, through
// llm.New: the markers sit where DESIGN.md puts them, the prefix never changes, and every call
// after the first reads it from the cache.
func TestPromptLayoutOnTheWire(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	fakeMemoryd(t, m)
	fake := llmtest.NewAnthropic(t, sc.script())
	cfg := sc.anthropic(t, fake)
	cfg.Memory.Enabled = true
	cfg.Agent.Profile = writeProfile(t)
	x := m.executor(t, cfg, nil)

	first := step(t, cfg, sc.task)
	first.SessionID += "-1"
	second := step(t, cfg, strings.Replace(sc.task, "Denmark", "Sweden", 1))
	second.SessionID += "-2"
	for _, st := range []struct {
		step protocol.Step
	}{{first}, {second}} {
		res, _ := m.runStep(t, x, st.step)
		if res.Outcome != protocol.OutcomeSuccess || res.Turns != len(sc.turns) {
			t.Fatalf("session %s: outcome %s after %d turns (%s), want success after %d", st.step.SessionID, res.Outcome, res.Turns, res.Reason, len(sc.turns))
		}
	}

	recs := fake.Requests()
	if len(recs) != 2*len(sc.turns) {
		t.Fatalf("%d model calls, want %d", len(recs), 2*len(sc.turns))
	}
	var tools0, system0 string
	for i, rec := range recs {
		if rec.Status != 200 {
			t.Fatalf("call %d answered %d", i, rec.Status)
		}
		w := decodeWire(t, rec.Body)
		session := first.SessionID
		if i >= len(sc.turns) {
			session = second.SessionID
		}

		// Markers: the last tool, both system blocks, the newest message; four in all.
		marks := 0
		for j, tl := range w.Tools {
			if marked(tl) != (j == len(w.Tools)-1) {
				t.Errorf("call %d: tool %d marked=%v; only the last tool carries the marker", i, j, marked(tl))
			}
		}
		if len(w.System) != 2 {
			t.Fatalf("call %d: %d system blocks, want the stable part and the strategic guidelines", i, len(w.System))
		}
		if !marked(w.System[0]) || !marked(w.System[1]) {
			t.Errorf("call %d: system blocks not both marked", i)
		}
		// The agent's profile, with the patch learning applied, is in the cached stable block.
		if st := text(w.System[0]); !strings.Contains(st, profileRules) {
			t.Errorf("call %d: the stable block %q lacks the profile with its applied patch", i, st)
		}
		if !strings.Contains(text(w.System[1]), strategicRule) || strings.Contains(text(w.System[0]), strategicRule) {
			t.Errorf("call %d: the strategic guideline is not alone in the second system block", i)
		}
		for j, msg := range w.Messages {
			for k, b := range msg.Content {
				newest := j == len(w.Messages)-1 && k == len(msg.Content)-1
				if marked(b) != newest {
					t.Errorf("call %d: messages[%d].content[%d] marked=%v, want only the newest block marked", i, j, k, marked(b))
				}
			}
		}
		marks = bytes.Count(rec.Body, []byte(`"cache_control"`))
		if marks != 4 {
			t.Errorf("call %d: %d cache_control markers, want 4", i, marks)
		}

		// The tactical guideline and the task travel in the first user message.
		if u := text(w.Messages[0].Content[0]); !strings.Contains(u, tacticalRule) || !strings.Contains(u, "invoices") {
			t.Errorf("call %d: first user message %q lacks the task or the tactical guideline", i, u)
		}
		for _, s := range w.System {
			st := text(s)
			if strings.Contains(st, tacticalRule) || strings.Contains(st, session) || strings.Contains(st, "step-1") || volatile.MatchString(st) {
				t.Errorf("call %d: volatile content in a system block: %q", i, st)
			}
		}
		if i == 0 {
			tools0, system0 = withoutMarks(w.Tools), withoutMarks(w.System)
		} else if withoutMarks(w.Tools) != tools0 || withoutMarks(w.System) != system0 {
			t.Errorf("call %d: tools or system differ from the first call's", i)
		}

		// Cache: the first call writes; every later call of the session reads all the previous
		// call wrote; the other session's first call reads the stable prefix.
		u := rec.Usage
		switch {
		case i == 0:
			if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens == 0 {
				t.Errorf("call 0: usage %+v, want a cache write and no read", u)
			}
		case i == len(sc.turns):
			if stable := stableTokens(w); u.CacheReadInputTokens != stable {
				t.Errorf("call %d (new session): read %d, want the stable prefix of %d tokens", i, u.CacheReadInputTokens, stable)
			}
		default:
			prev := recs[i-1].Usage
			if want := prev.CacheReadInputTokens + prev.CacheCreationInputTokens + prev.InputTokens; u.CacheReadInputTokens != want {
				t.Errorf("call %d: read %d, want all %d tokens of the previous call's prompt", i, u.CacheReadInputTokens, want)
			}
		}
		t.Logf("call %d: input %d, cache write %d, cache read %d", i, u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens)
	}
}

// With llm.cache off nothing is marked and nothing is read.
func TestCacheOffSendsNoMarkers(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	fake := llmtest.NewAnthropic(t, sc.script())
	cfg := sc.anthropic(t, fake)
	cfg.LLM.Cache = "off"
	x := m.executor(t, cfg, nil)
	for i := 1; i <= 2; i++ {
		st := step(t, cfg, sc.task)
		st.SessionID += "-" + string(rune('0'+i))
		if res, _ := m.runStep(t, x, st); res.Outcome != protocol.OutcomeSuccess {
			t.Fatalf("outcome %s (%s)", res.Outcome, res.Reason)
		}
	}
	for i, rec := range fake.Requests() {
		if bytes.Contains(rec.Body, []byte("cache_control")) {
			t.Errorf("call %d carries a cache_control marker", i)
		}
		if rec.Usage.CacheReadInputTokens != 0 || rec.Usage.CacheCreationInputTokens != 0 {
			t.Errorf("call %d: usage %+v, want no cache traffic", i, rec.Usage)
		}
	}
}

// A provider error that is not transient ends the step as failed with the reason, not a crash.
func TestProviderErrorFailsStep(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	fake := llmtest.NewAnthropic(t, llmtest.Script{Replies: []llmtest.Reply{sc.turns[0], {Status: 400}}})
	cfg := sc.anthropic(t, fake)
	x := m.executor(t, cfg, nil)
	res, evs := m.runStep(t, x, step(t, cfg, sc.task))
	if res.Outcome != protocol.OutcomeFailed || !strings.Contains(res.Reason, "model call failed") || res.Turns != 2 {
		t.Fatalf("outcome %s after %d turns (%s), want failed at turn 2 with the provider's error", res.Outcome, res.Turns, res.Reason)
	}
	calls := sessiontest.Of(evs, protocol.EvModelCall, "")
	if len(calls) != 2 || calls[1].Reason == "" || calls[0].Usage == nil {
		t.Fatalf("model_call events %+v: want the failed call traced with its error", calls)
	}
}
