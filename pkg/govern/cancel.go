// Package govern enforces what DESIGN calls "a session is a tree": cancellation and budgets.
// A Watcher delivers cancel notices to the work a process runs for a session; a Ledger charges
// spending to a session and its root with compare-and-set; Check compares spending with a budget.
// Executors, toolhosts and planners use it, so every role stops and counts the same way.
package govern

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// CancelledError is the cause of a context cancelled by a cancel notice.
type CancelledError struct {
	SessionID, By, Reason string
}

func (e *CancelledError) Error() string {
	s := fmt.Sprintf("session %s cancelled by %s", e.SessionID, e.By)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// AsCancelled returns the cancel cause of ctx, if ctx was cancelled by a notice.
func AsCancelled(ctx context.Context) (*CancelledError, bool) {
	var ce *CancelledError
	if errors.As(context.Cause(ctx), &ce) {
		return ce, true
	}
	return nil, false
}

// recentCap bounds how many cancelled sessions a Watcher remembers (to refuse late work).
const recentCap = 4096

// Watcher holds one subscription on the cancel broadcast and cancels the contexts of the work
// tracked for a session when its notice arrives. It also remembers the latest cancelled
// sessions (at most recentCap), so a request that arrives after the notice is refused.
type Watcher struct {
	sub *nats.Subscription

	mu      sync.Mutex
	next    uint64
	running map[string]map[uint64]context.CancelCauseFunc
	recent  map[string]*CancelledError
	order   []string
}

// Watch subscribes to names.CancelNoticeAll() on nc.
func Watch(nc *nats.Conn, names protocol.Names) (*Watcher, error) {
	w := &Watcher{running: map[string]map[uint64]context.CancelCauseFunc{}, recent: map[string]*CancelledError{}}
	sub, err := nc.Subscribe(names.CancelNoticeAll(), func(m *nats.Msg) {
		var n protocol.CancelNotice
		if protocol.Unmarshal(m.Data, &n) != nil || n.SessionID == "" {
			return
		}
		w.Notify(n)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to cancel notices %s: %w", names.CancelNoticeAll(), err)
	}
	w.sub = sub
	return w, nil
}

// Stop ends the subscription.
func (w *Watcher) Stop() {
	if w != nil && w.sub != nil {
		_ = w.sub.Unsubscribe()
	}
}

// Notify cancels every tracked context of the notice's session and remembers it.
func (w *Watcher) Notify(n protocol.CancelNotice) {
	cause := &CancelledError{SessionID: n.SessionID, By: n.By, Reason: n.Reason}
	w.mu.Lock()
	if _, seen := w.recent[n.SessionID]; !seen {
		w.order = append(w.order, n.SessionID)
		if len(w.order) > recentCap {
			delete(w.recent, w.order[0])
			w.order = w.order[1:]
		}
	}
	w.recent[n.SessionID] = cause
	fns := w.running[n.SessionID]
	delete(w.running, n.SessionID)
	w.mu.Unlock()
	for _, fn := range fns {
		fn(cause)
	}
}

// Track returns a context that is cancelled (with a *CancelledError cause) when session is
// cancelled, and a release func to call when the work ends. A session already known to be
// cancelled gives a context that is cancelled at once.
func (w *Watcher) Track(ctx context.Context, session string) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	if w == nil || session == "" {
		return cctx, func() { cancel(nil) }
	}
	w.mu.Lock()
	if c, ok := w.recent[session]; ok {
		w.mu.Unlock()
		cancel(c)
		return cctx, func() {}
	}
	id := w.next
	w.next++
	if w.running[session] == nil {
		w.running[session] = map[uint64]context.CancelCauseFunc{}
	}
	w.running[session][id] = cancel
	w.mu.Unlock()
	return cctx, func() {
		w.mu.Lock()
		if m := w.running[session]; m != nil {
			delete(m, id)
			if len(m) == 0 {
				delete(w.running, session)
			}
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// Cancelled reports whether a notice for session was seen lately.
func (w *Watcher) Cancelled(session string) (*CancelledError, bool) {
	if w == nil {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.recent[session]
	return c, ok
}

// FromMark turns a session record's cancel mark into the error that ends work for it.
func FromMark(session string, m *protocol.CancelMark) *CancelledError {
	if m == nil {
		return nil
	}
	return &CancelledError{SessionID: session, By: m.By, Reason: m.Reason}
}
