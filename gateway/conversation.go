package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
)

// turnLink places a new session in a conversation: the conversation's first session and the
// turn whose transcript it continues; fork marks the first session of a conversation forked
// from previous.
type turnLink struct {
	conversation, previous string
	fork                   bool
}

// errTurnTaken: the session id a new turn would take already names another message's turn
// (a follow-up sent at the same moment, or a submit that stopped before it recorded its turn in
// the conversation).
var errTurnTaken = errors.New("turn taken")

// newMessage reports whether in, sent under the id of session s, is another message than the one
// that started s: with a turn id, any other turn id; without one, another text.
func newMessage(s protocol.Session, in protocol.SubmitRequest) bool {
	if in.TurnID != "" {
		return in.TurnID != s.TurnID
	}
	return in.Task != s.Task
}

// continueConversation starts the next turn of the conversation that session prev belongs to:
// a new session <first>-<n> that continues the latest turn's transcript. The latest turn must
// have ended; a message with the turn id of the latest turn is a retry of it and answers with
// that turn. The turn's session is recorded before the conversation names it, so a submit that
// stops in between leaves a turn the next submit finds and adopts.
func (g *Gateway) continueConversation(ctx context.Context, prev protocol.Session, in protocol.SubmitRequest) (protocol.SubmitReply, error) {
	rootID := prev.Conversation
	if rootID == "" {
		rootID = prev.SessionID
	}
	for range 3 {
		root, err := g.readSession(ctx, rootID)
		if err != nil {
			return protocol.SubmitReply{}, err
		}
		lastID := root.LastTurn
		if lastID == "" {
			lastID = rootID
		}
		last, err := g.readSession(ctx, lastID)
		if err != nil {
			return protocol.SubmitReply{}, err
		}
		if in.TurnID != "" && last.TurnID == in.TurnID {
			// A retry of the latest turn: submitted again under its own id, it is answered as
			// a duplicate (and published again while still queued).
			again := in
			again.SessionID = last.SessionID
			return g.submit(ctx, again, turnLink{conversation: last.Conversation, previous: last.Previous, fork: last.ForkedFrom != ""})
		}
		if last.Status != protocol.StatusDone {
			last = g.settled(ctx, last)
		}
		if last.Status != protocol.StatusDone {
			return protocol.SubmitReply{}, fmt.Errorf("%w: session id %s is already used by another task, which is still running (turn %s): "+
				"wait for it to end (or cancel it), then send the follow-up", ErrRejected, in.SessionID, last.SessionID)
		}
		n := max(root.TurnCount, 1) + 1
		next := in
		next.SessionID = turnSessionID(rootID, n)
		rep, err := g.submit(ctx, next, turnLink{conversation: rootID, previous: last.SessionID})
		if errors.Is(err, errTurnTaken) {
			// Another message holds turn n: make the conversation name it, then look again
			// (it is running: this follow-up is refused; it ended: this one is turn n+1).
			if err := g.recordTurn(ctx, rootID, n, next.SessionID); err != nil {
				return protocol.SubmitReply{}, err
			}
			continue
		}
		if err != nil {
			return rep, err
		}
		return rep, g.recordTurn(ctx, rootID, n, next.SessionID)
	}
	return protocol.SubmitReply{}, fmt.Errorf("%w: other follow-ups to %s were sent at the same time; send yours again once they have ended", ErrRejected, rootID)
}

// settleWait is how long a follow-up waits for the latest turn's record to say it ended: a
// planner records a session done just after its usage event, which is when a client that
// follows the trace sends its next message.
const settleWait = 2 * time.Second

// settled returns the session's record once it says done, or as it is after settleWait.
func (g *Gateway) settled(ctx context.Context, s protocol.Session) protocol.Session {
	wctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	_ = g.sessions.Watch(wctx, s.SessionID, func(cur protocol.Session) bool {
		s = cur
		return s.Status != protocol.StatusDone
	})
	return s
}

// recordTurn makes the conversation's first session count turn n and name it as the latest,
// unless it already counts that many.
func (g *Gateway) recordTurn(ctx context.Context, rootID string, n int, turnID string) error {
	_, _, err := g.updateSession(ctx, rootID, func(s *protocol.Session) (bool, error) {
		if s.TurnCount >= n {
			return false, nil
		}
		s.TurnCount, s.LastTurn = n, turnID
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("record turn %s of conversation %s: %w", turnID, rootID, err)
	}
	return nil
}

// fork checks a fork's source turn and returns the link of the conversation it starts: the
// source must be a finished session of the same agent (its transcript is stored when it ends,
// and a transcript runs under its own agent's system prompt).
func (g *Gateway) fork(ctx context.Context, in *protocol.SubmitRequest) (turnLink, error) {
	if in.Parent != "" {
		return turnLink{}, fmt.Errorf("%w: a child session cannot be a fork", ErrRejected)
	}
	src, err := g.readSession(ctx, in.From)
	if err != nil {
		return turnLink{}, err
	}
	if src.Status != protocol.StatusDone {
		src = g.settled(ctx, src)
	}
	switch {
	case src.Agent != in.Agent:
		return turnLink{}, fmt.Errorf("%w: turn %s is a session of agent %s, not %s: a fork continues with its agent", ErrRejected, in.From, src.Agent, in.Agent)
	case src.Status != protocol.StatusDone:
		return turnLink{}, fmt.Errorf("%w: turn %s has not ended: fork it once it has", ErrRejected, in.From)
	}
	return turnLink{previous: in.From, fork: true}, nil
}

// turnSessionID is the id of turn n of conversation rootID: <rootID>-<n>, or, when that would
// be longer than a session id may be, rootID cut short and told apart by a hash of it whole.
func turnSessionID(rootID string, n int) string {
	suffix := "-" + strconv.Itoa(n)
	if len(rootID)+len(suffix) <= protocol.IDSession.Max {
		return rootID + suffix
	}
	sum := sha256.Sum256([]byte(rootID))
	hash := "-" + hex.EncodeToString(sum[:6])
	return rootID[:protocol.IDSession.Max-len(hash)-len(suffix)] + hash + suffix
}

func (g *Gateway) readSession(ctx context.Context, id string) (protocol.Session, error) {
	s, err := g.sessions.Get(ctx, id)
	if errors.Is(err, session.ErrNotFound) {
		return s, fmt.Errorf("%w: no session %s", ErrRejected, id)
	}
	return s, err
}
