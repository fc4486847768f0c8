package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session/sessiontest"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/toon"
)

func bigPayload(rows int) []byte {
	type row struct {
		Seq int    `json:"seq"`
		Msg string `json:"msg"`
	}
	var rs []row
	for i := range rows {
		rs = append(rs, row{i, fmt.Sprintf("request %d handled", i)})
	}
	b, _ := json.Marshal(map[string]any{"rows": rs, "service": "billing", "note": strings.Repeat("x", 50_000)})
	return b
}

// The view of a large result fits the cap, is valid in its format, and keeps the first and the
// last rows with the count.
func TestHeadTailViewIsValidAndBounded(t *testing.T) {
	payload := bigPayload(20_000)
	for _, format := range []string{"json", "toon", "auto"} {
		head := toon.NewObject(1)
		head.Set("handle", "res-x")
		out := headTailView(payload, head, 1000, format)
		if n := tokenize.Count(out); n > 1000 {
			t.Errorf("%s: view is %d tokens, cap 1000", format, n)
		}
		var v any
		var err error
		if strings.HasPrefix(out, "{") {
			err = json.Unmarshal([]byte(out), &v)
		} else {
			v, err = toon.DecodeBytes([]byte(out), toon.DecodeOptions{})
		}
		if err != nil {
			t.Fatalf("%s: the view does not decode: %v\n%s", format, err, out)
		}
		for _, want := range []string{"res-x", "20000", "request 0 handled", "request 19999 handled", "characters omitted"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: view lacks %q:\n%s", format, want, out)
			}
		}
	}
	// Not JSON at all: the text's ends, still valid JSON.
	text := []byte(strings.Repeat("line of plain text\n", 5000))
	out := headTailView(text, toon.NewObject(0), 500, "json")
	if !json.Valid([]byte(out)) || tokenize.Count(out) > 500 || !strings.Contains(out, "text_head") {
		t.Fatalf("plain-text view %q", out)
	}
}

// pagingModel is a model that pages through a large result: it calls the big tool, reads the
// handle from what it is shown, reads three pages from the start and the last page, checking
// each says where the next one starts, then answers.
type pagingModel struct {
	mu     sync.Mutex
	reqs   []llm.Request
	pages  []map[string]any
	handle string
	size   int
}

var handleRE = regexp.MustCompile(`res-[0-9a-f]{12}`)

func (p *pagingModel) Provider() string { return "test" }

func (p *pagingModel) Complete(_ context.Context, req llm.Request) (*llm.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	call := func(name string, args any) (*llm.Response, error) {
		b, _ := json.Marshal(args)
		return &llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("call_%d", len(p.reqs)), Name: name, Args: b}}, StopReason: llm.StopToolUse}, nil
	}
	if len(p.reqs) == 1 {
		return call("big", map[string]int{"rows": 38_000})
	}
	res := lastResults(req)
	if len(res) != 1 {
		return nil, fmt.Errorf("turn %d: %d results", len(p.reqs), len(res))
	}
	if p.handle == "" {
		p.handle = handleRE.FindString(res[0].Content)
		m := regexp.MustCompile(`bytes: (\d+)`).FindStringSubmatch(res[0].Content)
		if p.handle == "" || m == nil {
			return &llm.Response{Text: "no handle in: " + clipString(res[0].Content, 300)}, nil
		}
		fmt.Sscan(m[1], &p.size)
		return call(protocol.ToolReadResult, map[string]any{"handle": p.handle, "offset": 0})
	}
	var page map[string]any
	if err := json.Unmarshal([]byte(res[0].Content), &page); err != nil {
		v, derr := toon.DecodeBytes([]byte(res[0].Content), toon.DecodeOptions{})
		if derr != nil {
			return &llm.Response{Text: "unreadable page: " + clipString(res[0].Content, 300)}, nil
		}
		b, _ := json.Marshal(v)
		_ = json.Unmarshal(b, &page)
	}
	p.pages = append(p.pages, page)
	switch {
	case len(p.pages) < 3:
		return call(protocol.ToolReadResult, map[string]any{"handle": p.handle, "offset": page["next_offset"], "limit": 4000})
	case len(p.pages) == 3:
		return call(protocol.ToolReadResult, map[string]any{"handle": p.handle, "offset": p.size - 3000})
	}
	return &llm.Response{Text: "The log has 38000 rows; the last one is INV-037999.", StopReason: llm.StopEndTurn}, nil
}

// A 5 MB result: stored whole in the object store, the model sees a bounded head-and-tail view
// with a handle, pages through it with read_result, and the trace keeps the handle.
func TestLargeResultIsStoredAndPaged(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), "big")
	cfg := testConfig(testdata(t, "tools"), "big")
	cfg.Tools.MaxResultTokens = 2000
	model := &pagingModel{}
	x := m.executor(t, cfg, model)
	st := step(t, cfg, "How many rows does the billing log have, and what is the last invoice?")
	res, evs := m.runStep(t, x, st)
	if res.Outcome != protocol.OutcomeSuccess || !strings.Contains(res.FinalText, "38000 rows") {
		t.Fatalf("outcome %s (%s): %q", res.Outcome, res.Reason, res.FinalText)
	}
	if model.size < 5_000_000 {
		t.Fatalf("the model was shown %d bytes, want the ~5 MB result's size", model.size)
	}
	// What the model saw of the big result: bounded, valid, with the count.
	shown := lastResults(model.reqs[1])[0].Content
	if n := tokenize.Count(shown); n > cfg.Tools.MaxResultTokens {
		t.Fatalf("the view is %d tokens, cap %d", n, cfg.Tools.MaxResultTokens)
	}
	if _, err := toon.DecodeBytes([]byte(shown), toon.DecodeOptions{}); err != nil {
		t.Fatalf("the view is not valid TOON: %v\n%s", err, shown)
	}
	if !strings.Contains(shown, "38000") || !strings.Contains(shown, "INV-000000") || !strings.Contains(shown, "INV-037999") {
		t.Fatalf("the view lacks the count, the first or the last row:\n%s", shown)
	}
	t.Logf("view:\n%s", shown)
	// read_result is offered from the turn after the large result, never before.
	if slices.Contains(toolNamesOf(model.reqs[0]), protocol.ToolReadResult) || !slices.Contains(toolNamesOf(model.reqs[1]), protocol.ToolReadResult) {
		t.Fatalf("tools %v then %v: want read_result added after the large result", toolNamesOf(model.reqs[0]), toolNamesOf(model.reqs[1]))
	}
	// The object holds the whole result; the pages are its bytes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := m.Conn.JS.ObjectStore(ctx, m.Names.Bucket(protocol.ObjectPayloads))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := obs.GetBytes(ctx, objectName(st.SessionID, model.handle))
	if err != nil {
		t.Fatalf("stored result: %v", err)
	}
	var doc struct {
		Rows []struct {
			Seq int `json:"seq"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(whole, &doc); err != nil || len(doc.Rows) != 38_000 || len(whole) != model.size {
		t.Fatalf("stored %d bytes (%v), %d rows; want all %d bytes and 38000 rows", len(whole), err, len(doc.Rows), model.size)
	}
	if len(model.pages) != 4 {
		t.Fatalf("%d pages read, want 4", len(model.pages))
	}
	for i, pg := range model.pages {
		off := int(pg["offset"].(float64))
		text := pg["text"].(string)
		if !bytes.Equal(whole[off:off+len(text)], []byte(text)) {
			t.Fatalf("page %d at %d is not the stored bytes", i, off)
		}
		if i < 3 {
			if next := int(pg["next_offset"].(float64)); next != off+len(text) {
				t.Fatalf("page %d: next_offset %d, want %d", i, next, off+len(text))
			}
		} else if pg["end"] != true || off+len(text) != len(whole) {
			t.Fatalf("last page %v does not reach the end", pg["end"])
		}
	}
	if int(model.pages[1]["offset"].(float64)) != len(model.pages[0]["text"].(string)) {
		t.Fatal("the second page does not start where the first ended")
	}
	// The trace keeps the handle and the size, not the 5 MB.
	calls := sessiontest.Of(evs, protocol.EvToolCall, "")
	if len(calls) != 5 || calls[0].Tool != "big" {
		t.Fatalf("%d tool calls", len(calls))
	}
	var ref map[string]any
	if err := json.Unmarshal(calls[0].Result.Result, &ref); err != nil || ref["stored_as"] != model.handle || int(ref["bytes"].(float64)) != len(whole) {
		t.Fatalf("trace result %s, want the handle %s and the size", calls[0].Result.Result, model.handle)
	}
	if w := toolsEvents(evs, "widened"); len(w) != 1 || w[0].Attrs["by"] != "large result" {
		t.Fatalf("widened events %+v", w)
	}
}

// A handle of another session, or none, is a clear error that loses nothing.
func TestReadResultUnknownHandle(t *testing.T) {
	m := startMesh(t, testdata(t, "tools"), "big")
	cfg := testConfig(testdata(t, "tools"), "big")
	x := m.executor(t, cfg, nil)
	r := &run{e: x, step: step(t, cfg, "x"), ts: &toolset{read: true}}
	rep := r.readResult(context.Background(), llm.ToolCall{Name: protocol.ToolReadResult, Args: json.RawMessage(`{"handle":"res-000000000000"}`)})
	if rep.OK || !strings.Contains(rep.Error, "no stored result") {
		t.Fatalf("reply %+v", rep)
	}
	rep = r.readResult(context.Background(), llm.ToolCall{Name: protocol.ToolReadResult, Args: json.RawMessage(`{}`)})
	if rep.OK || rep.Kind != protocol.ToolErrBadArgs {
		t.Fatalf("reply %+v", rep)
	}
}
