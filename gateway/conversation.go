package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/session"
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
	_, _, err = g.updateSession(ctx, rootID, func(s *protocol.Session) (bool, error) {
		if s.LastTurn != root.LastTurn {
			return false, fmt.Errorf("%w: another follow-up to %s was sent at the same time; send yours again once it has ended", ErrRejected, rootID)
		}
		n := max(s.TurnCount, 1) + 1
		turnID = fmt.Sprintf("%s-%d", rootID, n)
		s.TurnCount, s.LastTurn = n, turnID
		return true, nil
	})
	if err != nil {
		return protocol.SubmitReply{}, err
	}
	next := in
	next.SessionID = turnID
	return g.submit(ctx, next, turnLink{conversation: rootID, previous: last.SessionID})
}

func (g *Gateway) readSession(ctx context.Context, id string) (protocol.Session, error) {
	s, err := g.sessions.Get(ctx, id)
	if errors.Is(err, session.ErrNotFound) {
		return s, fmt.Errorf("%w: no session %s", ErrRejected, id)
	}
	return s, err
}
