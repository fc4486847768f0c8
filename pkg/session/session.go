// Package session reads and changes session records (the sessions KV bucket), the one way every
// role does: the gateway creates them and marks cancels and children, the planner moves them
// through their states, the executor and the CLI read them.
package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

var (
	// ErrNotFound: the bucket has no record of the session.
	ErrNotFound = errors.New("no such session")
	// ErrExists: Create found a record under the id.
	ErrExists = errors.New("session exists")
	// ErrUnreadable: the record is there but does not decode (another schema version).
	ErrUnreadable = errors.New("unreadable session record")
)

// Records is the sessions bucket.
type Records struct {
	kv jetstream.KeyValue
}

// Open opens the provisioned sessions bucket.
func Open(ctx context.Context, js jetstream.JetStream, names protocol.Names) (*Records, error) {
	kv, err := bus.KV(ctx, js, names, protocol.BucketSessions)
	if err != nil {
		return nil, err
	}
	return &Records{kv: kv}, nil
}

// Get reads a session's record.
func (r *Records) Get(ctx context.Context, id string) (protocol.Session, error) {
	e, err := r.kv.Get(ctx, id)
	if err != nil {
		if bus.IsNotFound(err) {
			return protocol.Session{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
		}
		return protocol.Session{}, fmt.Errorf("read session %s: %w", id, err)
	}
	return decode(id, e)
}

func decode(id string, e jetstream.KeyValueEntry) (protocol.Session, error) {
	var s protocol.Session
	if err := protocol.Unmarshal(e.Value(), &s); err != nil {
		return s, fmt.Errorf("session %s: %w: %w", id, ErrUnreadable, err)
	}
	return s, nil
}

// Create records a new session; ErrExists when its id is taken.
func (r *Records) Create(ctx context.Context, s protocol.Session) error {
	data, err := protocol.Marshal(&s)
	if err != nil {
		return fmt.Errorf("record session %s: %w", s.SessionID, err)
	}
	if _, err := r.kv.Create(ctx, s.SessionID, data); err != nil {
		if bus.IsConflict(err) {
			return fmt.Errorf("record session %s: %w", s.SessionID, ErrExists)
		}
		return fmt.Errorf("record session %s: %w", s.SessionID, err)
	}
	return nil
}

// Update applies change to a session's record with compare-and-set (bus.UpdateKV), reading
// it again and calling change again when another writer got there first, and riding out a
// leader election for up to bus.LeaderWait. change reports whether it changed the record;
// Update stamps Updated on a changed one. It returns the record as change left it, whether it
// was written, and change's own error unwrapped.
func (r *Records) Update(ctx context.Context, id string, change func(*protocol.Session) (bool, error)) (protocol.Session, bool, error) {
	var out protocol.Session
	changed := false
	ctx, cancel := context.WithTimeout(ctx, bus.LeaderWait)
	defer cancel()
	err := bus.WhileNoLeader(ctx, func() error {
		_, err := bus.UpdateKV(ctx, r.kv, id, func(cur jetstream.KeyValueEntry) ([]byte, error) {
			changed = false
			if cur == nil {
				return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
			}
			s, err := decode(id, cur)
			if err != nil {
				return nil, err
			}
			ok, err := change(&s)
			out = s
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, bus.ErrKeep
			}
			s.Updated = time.Now().UTC()
			data, err := protocol.Marshal(&s)
			if err != nil {
				return nil, fmt.Errorf("session %s: %w", id, err)
			}
			out, changed = s, true
			return data, nil
		})
		return err
	})
	if err != nil {
		changed = false
	}
	return out, changed, err
}

// Children lists a session's child sessions (none when its record cannot be read), for
// trace.Tree.
func (r *Records) Children(ctx context.Context, id string) []string {
	s, err := r.Get(ctx, id)
	if err != nil {
		return nil
	}
	return s.Children
}

// Watch calls fn with each readable version of a session's record, the current one first, until
// fn returns false (nil) or ctx ends (its error).
func (r *Records) Watch(ctx context.Context, id string, fn func(protocol.Session) bool) error {
	w, err := r.kv.Watch(ctx, id)
	if err != nil {
		return fmt.Errorf("watch session %s: %w", id, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch session %s: the watch ended", id)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // the end of the current records, or a delete
			}
			if s, err := decode(id, e); err == nil && !fn(s) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("watch session %s: %w", id, ctx.Err())
		}
	}
}

// Each calls fn with every readable record, in no particular order, until fn returns false.
func (r *Records) Each(ctx context.Context, fn func(protocol.Session) bool) error {
	w, err := r.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("list sessions: the watch ended before every record was delivered")
			}
			if e == nil {
				return nil // every record delivered
			}
			if s, err := decode(e.Key(), e); err == nil && !fn(s) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("list sessions: %w", ctx.Err())
		}
	}
}
