package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// turnLink places a new session in a conversation.
type turnLink struct {
	conversation, previous string
}

// continueConversation starts the next turn of the conversation that session prev belongs to:
// a new session <first>-<n> that continues the latest turn's transcript. The latest turn must
// have ended; sending the same follow-up again answers with the turn it already started.
func (g *Gateway) continueConversation(ctx context.Context, prev protocol.Session, in protocol.SubmitRequest) (protocol.SubmitReply, error) {
	rootID := prev.Conversation
	if rootID == "" {
		rootID = prev.SessionID
	}
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
	if last.Task == in.Task && last.SessionID != rootID {
		return protocol.SubmitReply{SessionID: last.SessionID, Duplicate: true}, nil // a retried follow-up
	}
	if last.Status != protocol.StatusDone {
		return protocol.SubmitReply{}, fmt.Errorf("%w: session id %s is already used by another task, which is still running (turn %s): "+
			"wait for it to end (or cancel it), then send the follow-up", ErrRejected, in.SessionID, last.SessionID)
	}
	var turnID string
	_, _, err = g.updateSession(ctx, rootID, func(s *protocol.Session) error {
		if s.LastTurn != root.LastTurn {
			return fmt.Errorf("%w: another follow-up to %s was sent at the same time; send yours again once it has ended", ErrRejected, rootID)
		}
		n := max(s.TurnCount, 1) + 1
		turnID = turnSessionID(rootID, n)
		s.TurnCount, s.LastTurn = n, turnID
		return nil
	})
	if err != nil {
		return protocol.SubmitReply{}, err
	}
	next := in
	next.SessionID = turnID
	return g.submit(ctx, next, turnLink{conversation: rootID, previous: last.SessionID})
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
	var s protocol.Session
	e, err := g.sessions.Get(ctx, id)
	if err != nil {
		if bus.IsNotFound(err) {
			return s, fmt.Errorf("%w: no session %s", ErrRejected, id)
		}
		return s, fmt.Errorf("read session %s: %w", id, err)
	}
	if err := protocol.Unmarshal(e.Value(), &s); err != nil {
		return s, fmt.Errorf("read session %s: %w", id, err)
	}
	return s, nil
}
