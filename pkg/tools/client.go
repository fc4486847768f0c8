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

// errBusy marks a busy refusal for the retry loop.
var errBusy = errors.New("toolhost busy")

// DefaultCallTimeout bounds a Call given no timeout.
const DefaultCallTimeout = 60 * time.Second

// RetryEvery is how long Call waits for the reply to a call with an id before asking again.
var RetryEvery = 15 * time.Second

// UnavailableAfter is how long Call keeps retrying while no toolhost serves the tool (they may
// still be starting) before it answers with kind unavailable.
const UnavailableAfter = 10 * time.Second

// Call runs req on the toolhosts serving req.Tool and waits up to timeout for the reply. Every
// failure the model should see (no toolhost serves the tool, no reply in time, an undecodable
// reply) comes back as a reply with OK false and a Kind; the error is non-nil only when ctx
// ends or req cannot be encoded.
//
// Only what started nothing, or what the toolhost runs at most once, is retried: "no responders"
// (for up to UnavailableAfter), a toolhost's busy refusal (for up to timeout), and a request
// with a call id that timed out (the toolhost answers a repeat from its record). A request
// without a call id that reached a toolhost and timed out is never sent again, because a tool
// may not be idempotent; that is also why this does not use bus.Request.
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

	// A call with an id is safe to send again: the toolhost answers a repeat from its record,
	// or joins the run in flight, or takes the call over once the host running it has died.
	// So it is asked again every RetryEvery while no reply comes, which is how a call whose
	// toolhost died finishes instead of waiting out its whole timeout.
	perTry := timeout
	if req.CallID != "" {
		perTry = min(timeout, RetryEvery)
	}
	var msg *nats.Msg
	var reply protocol.ToolReply
	var decodeErr, last error
	var busy *protocol.ToolReply
	for {
		b := backoff.NewExponentialBackOff()
		b.InitialInterval = 50 * time.Millisecond
		b.MaxInterval = time.Second
		b.MaxElapsedTime = timeout
		err = backoff.Retry(func() error {
			tctx, tcancel := context.WithTimeout(cctx, perTry)
			defer tcancel()
			m, err := nc.RequestWithContext(tctx, subject, data)
			if err != nil && cctx.Err() != nil && errors.Is(last, nats.ErrNoResponders) {
				// Time ran out while nobody served the tool: that stays "unavailable".
				return backoff.Permanent(err)
			}
			last, busy = err, nil
			switch {
			case err == nil:
				// A toolhost with every slot and queue place taken started nothing: ask again
				// (the queue group may pick another toolhost), for as long as the timeout allows.
				var r protocol.ToolReply
				derr := protocol.Unmarshal(m.Data, &r)
				if derr == nil && !r.OK && r.Kind == protocol.ToolErrBusy {
					busy = &r
					return errBusy
				}
				msg, reply, decodeErr = m, r, derr
				return nil
			case errors.Is(err, nats.ErrNoResponders):
				if time.Since(start) >= UnavailableAfter {
					return backoff.Permanent(err)
				}
				return err
			}
			return backoff.Permanent(err)
		}, backoff.WithContext(b, cctx))
		timedOut := errors.Is(last, context.DeadlineExceeded) || errors.Is(last, nats.ErrTimeout)
		if err == nil || req.CallID == "" || cctx.Err() != nil || !timedOut {
			break
		}
	}

	if err != nil {
		if ctx.Err() != nil {
			return protocol.ToolReply{}, fmt.Errorf("call tool %s: %w", req.Tool, context.Cause(ctx))
		}
		waited := time.Since(start).Round(time.Millisecond)
		switch {
		case busy != nil:
			return failedReply(protocol.ToolErrBusy, fmt.Sprintf("every toolhost serving %q stayed busy for %s: %s", req.Tool, waited, busy.Error)), nil
		case errors.Is(last, nats.ErrNoResponders):
			return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("no toolhost serves tool %q (nothing answered on %s for %s)", req.Tool, subject, waited)), nil
		case errors.Is(last, context.DeadlineExceeded), errors.Is(last, nats.ErrTimeout):
			return failedReply(protocol.ToolErrTimeout, fmt.Sprintf("no reply from tool %q within %s", req.Tool, timeout)), nil
		}
		return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("call tool %q: %v", req.Tool, last)), nil
	}

	if derr := decodeErr; derr != nil {
		desc := msg.Header.Get("Nats-Service-Error")
		if desc == "" {
			desc = derr.Error()
		}
		return failedReply(protocol.ToolErrUnavailable, fmt.Sprintf("toolhost reply for %q is unusable: %s", req.Tool, desc)), nil
	}
	if reply.LatencyMS == 0 {
		reply.LatencyMS = time.Since(start).Milliseconds()
	}
	return reply, nil
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
