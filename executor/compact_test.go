package executor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skein-mesh/skein/pkg/llm/llmtest"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
)

// The scenario's results are several thousand tokens each. With a window this small the budget
// (0.8 of it) holds one fresh result plus the stubs: the third turn only needs the old bodies
// dropped, the fourth also needs the older turns folded.
const tinyWindow = 4000

// Against the Anthropic fake, which rejects broken tool_use/tool_result pairing: old result
// bodies become stubs with their calls kept, then older turns are folded into a digest, then the
// newest result, still over the budget alone, is stored and cut to its head and tail; each
// compaction is traced with the tokens it saved, the system blocks never change and the tools
// only gain read_result.
func TestCompactionKeepsPairingAndPrefix(t *testing.T) {
	sc := loadScenario(t)
	m := startMesh(t, sc.dir, sc.cfg.Tools.Enabled...)
	fake := llmtest.NewAnthropic(t, sc.script())
	cfg := sc.anthropic(t, fake)
	cfg.LLM.ContextWindow = tinyWindow
	// The scenario's 2048-token answer would leave a 4000-token window too little room for the
	// system prompt, the tools and the task, and the step would be refused before any call.
	cfg.LLM.MaxTokens = 1024
	x := m.executor(t, cfg, nil)

	res, evs := m.runStep(t, x, step(t, cfg, sc.task))
	if res.Outcome != protocol.OutcomeSuccess {
		t.Fatalf("outcome %s (%s), want success", res.Outcome, res.Reason)
	}
	comps := sessiontest.Of(evs, protocol.EvCompaction, "")
	var stubbed, folded bool
	for _, c := range comps {
		t.Logf("turn %d: %s, %d tokens saved", c.Turn, c.Reason, c.TokensSaved)
		if c.TokensSaved <= 0 {
			t.Errorf("compaction event without savings: %+v", c)
		}
		switch {
		case strings.Contains(c.Reason, "dropped bodies"):
			stubbed = true
		case strings.Contains(c.Reason, "summarized"):
			if !stubbed {
				t.Error("older turns were folded before old results were stubbed")
			}
			folded = true
		}
	}
	if !stubbed || !folded {
		t.Fatalf("compactions %+v: want old result bodies dropped, then older turns folded", comps)
	}

	recs := fake.Requests()
	var tools0, system0 string
	sawStub, sawDigest := false, false
	for i, rec := range recs {
		if rec.Status != 200 {
			t.Fatalf("call %d answered %d: the fake rejected the transcript", i, rec.Status)
		}
		w := decodeWire(t, rec.Body)
		tools := w.Tools
		if n := len(tools); n > 0 && string(tools[n-1]["name"]) == `"read_result"` {
			tools = tools[:n-1]
		}
		if i == 0 {
			tools0, system0 = withoutMarks(tools), withoutMarks(w.System)
		} else if withoutMarks(tools) != tools0 || withoutMarks(w.System) != system0 {
			t.Errorf("call %d: compaction touched the tools or the system blocks", i)
		}
		if bytes.Contains(rec.Body, []byte("[elided to save context")) && !sawStub {
			sawStub = true
			// The stubbed results still answer calls that are still in the transcript.
			uses, results := 0, 0
			for _, msg := range w.Messages {
				for _, b := range msg.Content {
					switch text := string(b["type"]); text {
					case `"tool_use"`:
						uses++
					case `"tool_result"`:
						results++
					}
				}
			}
			if uses != results || uses < 3 {
				t.Errorf("call %d: %d tool_use and %d tool_result blocks after stubbing; want every call kept", i, uses, results)
			}
		}
		if bytes.Contains(rec.Body, []byte("Summary of earlier turns")) {
			sawDigest = true
			var first []string
			for _, b := range w.Messages[0].Content {
				first = append(first, text(b))
			}
			if !strings.Contains(strings.Join(first, "\n"), "called list_dir") || !strings.Contains(first[0], "Denmark") {
				t.Errorf("call %d: first message %q: want the task followed by a digest of the folded calls", i, first)
			}
		}
	}
	if !sawStub || !sawDigest {
		t.Fatalf("requests show stubs=%v digest=%v, want both", sawStub, sawDigest)
	}
	// The newest result is cut to its head and tail, not dropped: the model still reads log
	// lines, gets a handle to the whole result, and read_result to page with.
	last := decodeWire(t, recs[len(recs)-1].Body)
	lastMsg := last.Messages[len(last.Messages)-1]
	raw, _ := json.Marshal(lastMsg.Content)
	if !bytes.Contains(raw, []byte("cache miss for key")) || !bytes.Contains(raw, []byte("handle: res-")) {
		t.Errorf("the newest tool result lost its lines or has no handle: %s", clipString(string(raw), 400))
	}
	if n := len(last.Tools); string(last.Tools[n-1]["name"]) != `"read_result"` {
		t.Error("read_result is not offered with the bounded result")
	}
}
