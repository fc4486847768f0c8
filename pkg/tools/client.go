package tools

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// DefaultCallTimeout bounds a Call given no timeout.
const DefaultCallTimeout = 60 * time.Second

// MaxSilence is the longest Call waits, hearing nothing, before it asks again for a call with an
// id: the wait starts at protocol.CallSilence and doubles after each silent repeat, because a
// toolhost that does not send progress (an older one) answers only at the end.
var MaxSilence = 15 * time.Second

// UnavailableAfter is how long Call keeps retrying while no toolhost serves the tool (they may
// still be starting) before it answers with kind unavailable.
const UnavailableAfter = 10 * time.Second

// Call runs req on the toolhosts serving req.Tool and waits up to timeout for the reply. Every
// failure the model should see (no toolhost serves the tool, no reply in time, an undecodable
// reply) comes back as a reply with OK false and a Kind; the error is non-nil only when ctx
// ends or req cannot be encoded.
//
// Every request of the call goes out with one reply subject, which Call listens on until the
// end, and asks for progress (protocol.HeaderCallProgress): the toolhost holding the call says
// so every protocol.CallProgressEvery. Only what started nothing, or what the toolhost runs at
// most once, is sent again: after "no responders" (for up to UnavailableAfter), after a
// toolhost's busy refusal (for up to timeout), and, for a request with a call id, after
// protocol.CallSilence without a word: the toolhost holding it has died, and the one that gets
// the repeat takes the call over once the dead host's lease lapses (or answers from the record).
// A request without a call id that reached a toolhost is never sent again, because a tool may
// not be idempotent; that is also why this does not use bus.Request.
func Call(ctx context.Context, nc *nats.Conn, names protocol.Names, req protocol.ToolRequest, timeout time.Duration) (protocol.ToolReply, error) {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	if err := protocol.IDTool.Check(req.Tool); err != nil {
		return failedReply(protocol.ToolErrUnknown, err.Error()), nil
	}
	data, err := protocol.Marshal(&req)
	if err != nil {
		return protocol.ToolReply{}, fmt.Errorf("call tool %s: %w", req.Tool, err)
	}
	subject := names.Tool(req.Tool)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("call tool %q: listen for its reply: %v", req.Tool, err)), nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	msg := &nats.Msg{Subject: subject, Reply: sub.Subject, Data: data,
		Header: nats.Header{protocol.HeaderCallProgress: []string{"1"}}}
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval, retry.MaxElapsedTime = 50*time.Millisecond, time.Second, 0
	// pause waits before a request is sent again after a refusal; false when time is up.
	pause := func() bool {
		select {
		case <-time.After(retry.NextBackOff()):
			return true
		case <-cctx.Done():
			return false
		}
	}

	var (
		noResponders time.Time // since when nothing has served the tool; zero while something does
		busy         *protocol.ToolReply
		sendErr      error
	)
	silence := protocol.CallSilence
	send := func() {
		if sendErr = nc.PublishMsg(msg); sendErr != nil && cctx.Err() == nil {
			_ = pause() // a connection that is reconnecting: the next silence or retry sends again
		}
	}
	send()
	for {
		wctx, wcancel := context.WithTimeout(cctx, silence)
		m, err := sub.NextMsgWithContext(wctx)
		wcancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			if noResponders.IsZero() {
				noResponders = time.Now()
			}
			busy = nil
			if time.Since(noResponders) >= UnavailableAfter || !pause() {
				return finalFailure(ctx, req, subject, start, timeout, busy, true, nil)
			}
			send()
			continue
		case err == nil && len(m.Data) == 0 && m.Header.Get(protocol.HeaderCallProgress) != "":
			noResponders, silence = time.Time{}, protocol.CallSilence // the call is held and alive
			continue
		case err == nil:
			noResponders = time.Time{}
			var r protocol.ToolReply
			if derr := protocol.Unmarshal(m.Data, &r); derr != nil {
				desc := m.Header.Get("Nats-Service-Error")
				if desc == "" {
					desc = derr.Error()
				}
				return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("toolhost reply for %q is unusable: %s", req.Tool, desc)), nil
			}
			if !r.OK && r.Kind == protocol.ToolErrBusy {
				// Every slot and queue place taken, nothing started: ask again (the queue group
				// may pick another toolhost), for as long as the timeout allows.
				busy = &r
				if !pause() {
					return finalFailure(ctx, req, subject, start, timeout, busy, false, nil)
				}
				send()
				continue
			}
			if r.LatencyMS == 0 {
				r.LatencyMS = time.Since(start).Milliseconds()
			}
			return r, nil
		case cctx.Err() != nil:
			return finalFailure(ctx, req, subject, start, timeout, busy, !noResponders.IsZero(), sendErr)
		case errors.Is(err, context.DeadlineExceeded):
			// Silence. A call with an id is asked for again (its toolhost is gone; a repeat is
			// answered from the record, joins the run, or takes it over); one without is waited for.
			if req.CallID != "" {
				send()
				silence = min(2*silence, MaxSilence)
			}
			continue
		default:
			return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("call tool %q: %v", req.Tool, err)), nil
		}
	}
}

// finalFailure is the reply of a call that got no usable answer in time, or the caller's error
// when ctx ended.
func finalFailure(ctx context.Context, req protocol.ToolRequest, subject string, start time.Time, timeout time.Duration,
	busy *protocol.ToolReply, noResponders bool, sendErr error) (protocol.ToolReply, error) {
	if ctx.Err() != nil {
		return protocol.ToolReply{}, fmt.Errorf("call tool %s: %w", req.Tool, context.Cause(ctx))
	}
	waited := time.Since(start).Round(time.Millisecond)
	switch {
	case noResponders:
		return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("no toolhost serves tool %q (nothing answered on %s for %s)", req.Tool, subject, waited)), nil
	case busy != nil:
		return failedReply(protocol.ToolErrBusy, fmt.Sprintf("every toolhost serving %q stayed busy for %s: %s", req.Tool, waited, busy.Error)), nil
	case sendErr != nil:
		return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("call tool %q: %v", req.Tool, sendErr)), nil
	}
	return failedReply(protocol.ToolErrTimeout, fmt.Sprintf("no reply from tool %q within %s", req.Tool, timeout)), nil
}

// UnknownTool is the reply for a tool the model asked for that is not offered, naming the tools
// that are, so the model can correct itself.
func UnknownTool(name string, offered []string) protocol.ToolReply {
	o := append([]string(nil), offered...)
	sort.Strings(o)
	msg := fmt.Sprintf("unknown tool %q", name)
	if len(o) > 0 {
		msg += "; available tools: " + strings.Join(o, ", ")
	}
	return failedReply(protocol.ToolErrUnknown, msg)
}

func failedReply(kind, msg string) protocol.ToolReply {
	return protocol.ToolReply{ToolResult: protocol.ToolResult{OK: false, Kind: kind, Error: msg}}
}

// MissingToolsError reports enabled tools that no toolhost has published (yet). Catalog
// returns it together with the specs it did find.
type MissingToolsError struct {
	Names []string
}

func (e *MissingToolsError) Error() string {
	return fmt.Sprintf("tools %s are enabled but not in the tools catalog (is a toolhost serving them?)", strings.Join(e.Names, ", "))
}

// Catalog reads the tool specs toolhosts published to the tools KV, sorted by name. With a
// non-empty enabled allow-list only those tools are returned, and names not in the catalog
// give a *MissingToolsError alongside the specs that were found. With an empty list every
// published tool is returned: toolhosts publish only what their own allow-list enables.
func Catalog(ctx context.Context, js jetstream.JetStream, names protocol.Names, enabled []string) ([]protocol.ToolSpec, error) {
	kv, err := bus.KV(ctx, js, names, protocol.BucketTools)
	if err != nil {
		return nil, err
	}
	keys := enabled
	if len(keys) == 0 {
		keys, err = kv.Keys(ctx)
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list tools catalog: %w", err)
		}
	}
	var specs []protocol.ToolSpec
	var missing []string
	seen := map[string]bool{}
	for _, key := range keys {
		if seen[key] {
			continue
		}
		seen[key] = true
		if !protocol.IDTool.Valid(key) {
			missing = append(missing, key)
			continue
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			missing = append(missing, key)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read tool %s from catalog: %w", key, err)
		}
		var spec protocol.ToolSpec
		if err := protocol.Unmarshal(e.Value(), &spec); err != nil {
			return nil, fmt.Errorf("tool %s in catalog: %w", key, err)
		}
		if spec.Name != key {
			return nil, fmt.Errorf("tool catalog entry %s holds the spec of %q", key, spec.Name)
		}
		specs = append(specs, spec)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	if len(missing) > 0 {
		return specs, &MissingToolsError{Names: missing}
	}
	return specs, nil
}

// Publish writes specs to the tools KV, skipping entries that already hold the same bytes so
// several toolhosts starting together do not churn revisions.
func Publish(ctx context.Context, js jetstream.JetStream, names protocol.Names, specs []protocol.ToolSpec) error {
	kv, err := bus.KV(ctx, js, names, protocol.BucketTools)
	if err != nil {
		return err
	}
	for i := range specs {
		s := specs[i]
		data, err := protocol.Marshal(&s)
		if err != nil {
			return err
		}
		if e, err := kv.Get(ctx, s.Name); err == nil && string(e.Value()) == string(data) {
			continue
		}
		if _, err := kv.Put(ctx, s.Name, data); err != nil {
			return fmt.Errorf("publish tool %s to catalog: %w", s.Name, err)
		}
	}
	return nil
}
