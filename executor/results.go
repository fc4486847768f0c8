package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/llm"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tokenize"
	"github.com/skein-mesh/skein/pkg/toon"
)

// overCapBytesPerToken: a result of more bytes than this per allowed token is over the cap
// without counting its tokens (counting megabytes costs seconds; no real text packs that many
// bytes into a token).
const overCapBytesPerToken = 32

// viewOverhead is what the envelope around a head-and-tail view costs, kept free of the cap.
const viewOverhead = 120

// storeTimeout bounds writing or reading one stored result.
const storeTimeout = 30 * time.Second

var readResultDef = llm.ToolDef{
	Name: protocol.ToolReadResult,
	Description: "Read part of a tool result that was too large to show whole. The whole result is stored as compact JSON " +
		"text; give the handle you were shown, a byte offset (0 for the start) and how many bytes to read. " +
		"Each answer says the next offset.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"handle":{"type":"string","description":"The handle shown with the large result."},` +
		`"offset":{"type":"integer","minimum":0,"description":"Byte offset to start at."},` +
		`"limit":{"type":"integer","minimum":1,"description":"How many bytes to read (the answer says the most allowed)."}},` +
		`"required":["handle"],"additionalProperties":false}`),
}

// resultHandle is what the model calls a stored result: short, and the same for the same call
// of the same step, so a redelivered step stores over the same object.
func resultHandle(stepID, callID string) string {
	h := sha256.Sum256([]byte(stepID + "\x00" + callID))
	return "res-" + hex.EncodeToString(h[:6])
}

// objectName keys a stored result by session, so a handle reads only its own session's results.
func objectName(session, handle string) string { return session + "/" + handle }

// pageLimits of read_result in bytes: the default and the most one call returns. A page must
// itself fit the result cap (a token is at least one byte; JSON text averages ~4 per token).
func (r *run) pageLimits() (def, most int) {
	c := r.e.d.Config.Tools.MaxResultTokens
	if c <= 0 {
		c = 4000
	}
	return 2 * c, 3 * c
}

// render is what the model reads of one result, and the result as the trace keeps it. A result
// over tools.max_result_tokens is stored whole in the object store; the model sees a head and
// tail of it (valid TOON/JSON), its size and a handle for read_result, and the trace keeps the
// handle instead of the megabytes.
func (r *run) render(ctx context.Context, c llm.ToolCall, tr protocol.ToolResult, format string) (string, protocol.ToolResult) {
	limit := r.e.d.Config.Tools.MaxResultTokens
	payload := modelPayload(tr)
	if r.rs.raw == nil {
		r.rs.raw = map[string][]byte{}
	}
	r.rs.raw[c.ID] = payload
	if limit <= 0 || len(payload) <= limit || protocol.Builtin(c.Name) {
		return formatPayload(payload, format), tr
	}
	if len(payload) <= overCapBytesPerToken*limit {
		if out := formatPayload(payload, format); tokenize.Count(out) <= limit {
			return out, tr
		}
	}
	return r.bound(ctx, c, tr, payload, limit, format)
}

// bound stores payload and returns the view of it at most limit tokens long.
func (r *run) bound(ctx context.Context, c llm.ToolCall, tr protocol.ToolResult, payload []byte, limit int, format string) (string, protocol.ToolResult) {
	handle, stored := r.rs.handles[c.ID]
	var err error
	if !stored {
		handle, err = r.storeResult(ctx, c, payload)
	}
	head := toon.NewObject(4)
	if err != nil {
		r.e.d.Logger.Warn("a large tool result could not be stored; the model sees only its head and tail",
			"session", r.step.SessionID, "tool", c.Name, "err", err)
		head.Set("bytes", num(len(payload)))
		head.Set("note", "Too large to show whole, and it could not be stored ("+clipString(err.Error(), 200)+"): only its head and tail are shown.")
	} else {
		head.Set("handle", handle)
		head.Set("bytes", num(len(payload)))
		head.Set("note", fmt.Sprintf("Too large to show whole (over %d tokens): its head and tail are shown. "+
			"Read any part of the whole result (compact JSON text) with read_result(handle, offset, limit).", limit))
	}
	out := headTailView(payload, head, limit, format)
	// The trace keeps the handle and the size, not the body; the object holds the body.
	kept := tr
	ref, _ := json.Marshal(map[string]any{"stored_as": handle, "object": objectName(r.step.SessionID, handle),
		"bytes": len(payload), "tool": c.Name})
	if err != nil {
		ref, _ = json.Marshal(map[string]any{"not_stored": err.Error(), "bytes": len(payload), "tool": c.Name})
	}
	kept.Result = ref
	if err == nil {
		if r.rs.handles == nil {
			r.rs.handles = map[string]string{}
		}
		r.rs.handles[c.ID] = handle
		r.ts.request(protocol.ToolReadResult, "large result")
	}
	return out, kept
}

func (r *run) storeResult(ctx context.Context, c llm.ToolCall, payload []byte) (string, error) {
	handle := resultHandle(r.step.StepID, c.ID)
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	obs, err := r.e.payloads(sctx)
	if err != nil {
		return "", err
	}
	meta := jetstream.ObjectMeta{Name: objectName(r.step.SessionID, handle), Description: "tool result of " + c.Name,
		Metadata: map[string]string{"session": r.step.SessionID, "step": r.step.StepID, "call": c.ID, "tool": c.Name}}
	if _, err := obs.Put(sctx, meta, bytes.NewReader(payload)); err != nil {
		return "", fmt.Errorf("store result of %s: %w", c.Name, err)
	}
	return handle, nil
}

// readResult answers read_result: a page of a stored result of this session.
func (r *run) readResult(ctx context.Context, c llm.ToolCall) protocol.ToolReply {
	var args struct {
		Handle string `json:"handle"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	bad := func(msg string) protocol.ToolReply {
		return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrBadArgs, Error: msg}}
	}
	if err := json.Unmarshal(c.Args, &args); err != nil || args.Handle == "" {
		return bad(`read_result needs {"handle": "...", "offset": 0, "limit": ...}`)
	}
	def, most := r.pageLimits()
	if args.Limit <= 0 {
		args.Limit = def
	}
	args.Limit = min(args.Limit, most)
	data, err := r.fetch(ctx, args.Handle)
	if err != nil {
		return protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrToolError, Error: err.Error()}}
	}
	if args.Offset < 0 || args.Offset > len(data) {
		return bad(fmt.Sprintf("offset %d is outside the result (%d bytes)", args.Offset, len(data)))
	}
	start := args.Offset
	for start > 0 && start < len(data) && !utf8.RuneStart(data[start]) {
		start-- // never start inside a character
	}
	end := min(start+args.Limit, len(data))
	for end < len(data) && end > start && !utf8.RuneStart(data[end]) {
		end--
	}
	page := map[string]any{"handle": args.Handle, "bytes": len(data), "offset": start, "text": string(data[start:end])}
	if end < len(data) {
		page["next_offset"] = end
	} else {
		page["end"] = true
	}
	out, _ := json.Marshal(page)
	return protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true, Result: out}}
}

// fetch reads a stored result of this session, keeping the last one read: paging through a
// result reads it once.
func (r *run) fetch(ctx context.Context, handle string) ([]byte, error) {
	if r.rs.page != nil && r.rs.page.handle == handle {
		return r.rs.page.data, nil
	}
	fctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	obs, err := r.e.payloads(fctx)
	if err != nil {
		return nil, err
	}
	data, err := obs.GetBytes(fctx, objectName(r.step.SessionID, handle))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("no stored result %q in this session (handles look like res-0123456789ab)", handle)
	}
	if err != nil {
		return nil, fmt.Errorf("read stored result %s: %w", handle, err)
	}
	r.rs.page = &storedPage{handle: handle, data: data}
	return data, nil
}

// resultState is what a step knows of its results beyond the transcript: the payloads of the
// newest turn (compaction may still have to bound them), the handles of stored results, and the
// stored result read last.
type resultState struct {
	raw     map[string][]byte // call id -> payload, newest turn only
	handles map[string]string // call id -> handle
	page    *storedPage
}

type storedPage struct {
	handle string
	data   []byte
}

// headTailView renders {"large_result": head, "head_and_tail": view} in the result format,
// at most limit tokens: arrays keep their first and last items (with the count), long strings
// their start and end, as many as fit. The view is a real value, so it stays valid TOON/JSON.
func headTailView(payload []byte, head *toon.Object, limit int, format string) string {
	budget := max(limit-viewOverhead, 50)
	wrap := func(view any) string {
		o := toon.NewObject(2)
		o.Set("large_result", head)
		o.Set("head_and_tail", view)
		b, err := json.Marshal(o)
		if err != nil {
			return ""
		}
		return formatPayload(b, format)
	}
	v, err := toon.ParseJSON(bytes.NewReader(payload))
	if err == nil {
		for _, k := range []int{64, 32, 16, 8, 4, 2, 1, 0} {
			out := wrap(shrink(v, k, max(120, k*100)))
			if out != "" && tokenize.Count(out) <= budget+viewOverhead {
				return out
			}
		}
	}
	// Not JSON, or too wide to shrink by items: the start and the end of the text itself.
	for n := budget * 2; n >= 16; n /= 2 {
		o := toon.NewObject(2)
		o.Set("text_head", cutString(string(payload[:min(n, len(payload))]), false))
		o.Set("text_tail", cutString(string(payload[max(0, len(payload)-n):]), true))
		if out := wrap(o); tokenize.Count(out) <= budget+viewOverhead {
			return out
		}
	}
	return wrap(nil)
}

// shrink keeps the first and last k items of every array and the ends of long strings.
func shrink(v any, k, strMax int) any {
	switch t := v.(type) {
	case []any:
		if len(t) <= 2*k {
			out := make([]any, len(t))
			for i, x := range t {
				out[i] = shrink(x, k, strMax)
			}
			return out
		}
		o := toon.NewObject(4)
		o.Set("count", num(len(t)))
		o.Set("omitted", num(len(t)-2*k))
		h := make([]any, 0, k)
		for _, x := range t[:k] {
			h = append(h, shrink(x, k, strMax))
		}
		tl := make([]any, 0, k)
		for _, x := range t[len(t)-k:] {
			tl = append(tl, shrink(x, k, strMax))
		}
		o.Set("head", h)
		o.Set("tail", tl)
		return o
	case *toon.Object:
		o := toon.NewObject(t.Len())
		for i := range t.Len() {
			key, val := t.At(i)
			o.Set(key, shrink(val, k, strMax))
		}
		return o
	case string:
		if utf8.RuneCountInString(t) <= strMax {
			return t
		}
		rs := []rune(t)
		return string(rs[:strMax/2]) + fmt.Sprintf(" …[%d characters omitted]… ", len(rs)-strMax) + string(rs[len(rs)-strMax/2:])
	}
	return v
}

// cutString drops a partial character at the cut end.
func cutString(s string, fromEnd bool) string {
	if fromEnd {
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
		return s
	}
	return strings.ToValidUTF8(s, "")
}

func num(n int) toon.Number { return toon.Number(strconv.Itoa(n)) }

// boundNewest shrinks the tool results of the newest messages by over tokens in all: each
// result bigger than its share is stored (once) and replaced by a head-and-tail view.
func (r *run) boundNewest(ctx context.Context, turn, over int) {
	if over >= 0 {
		return
	}
	type ref struct{ msg, block, tokens int }
	var big []ref
	total := 0
	for i := max(len(r.msgs)-keepRecent, 1); i < len(r.msgs); i++ {
		for j, b := range r.msgs[i].Content {
			if b.Type == llm.BlockToolResult && r.rs.raw[b.ToolResult.CallID] != nil {
				n := tokenize.Count(b.ToolResult.Content)
				big = append(big, ref{i, j, n})
				total += n
			}
		}
	}
	if len(big) == 0 {
		return
	}
	share := max(200, (total+over)/len(big))
	names := r.callNames()
	format := r.e.d.Config.Tools.ResultFormat
	for _, b := range big {
		if b.tokens <= share {
			continue
		}
		tr := *r.msgs[b.msg].Content[b.block].ToolResult
		c := llm.ToolCall{ID: tr.CallID, Name: names[tr.CallID]}
		tr.Content, _ = r.bound(ctx, c, protocol.ToolResult{}, r.rs.raw[tr.CallID], share, format)
		r.msgs[b.msg].Content[b.block].ToolResult = &tr
	}
	// read_result must be offered on the call this compaction precedes.
	if note := r.widen(turn); note != nil {
		last := &r.msgs[len(r.msgs)-1]
		last.Content = append(append([]llm.Block(nil), last.Content...), note...)
	}
}
