package protocol

import (
	"crypto/sha256"
	"encoding/hex"
)

// A conversation is a chain of sessions, one per turn (Session.Conversation, Previous). A turn
// is named by its session id; the message that starts it carries a turn id the client mints
// before its first try, so a retried submit of that message is recognised as the same turn,
// while the same text sent again is a new turn.

// DerivedTurnID is the turn id of a message sent without one, derived from the session id it
// was sent under and its text: what the gateway records for such a session, and what `skein run`
// sends, so the same task under the same session id is one turn however often it is sent.
func DerivedTurnID(session, text string) string {
	sum := sha256.Sum256([]byte(session + "\x00" + text))
	return "d-" + hex.EncodeToString(sum[:10])
}

// AttrForkedFrom, on a session_started event, names the turn a forked conversation continues;
// AttrPrevious, the turn a conversation's later turn continues.
const (
	AttrForkedFrom = "forked_from"
	AttrPrevious   = "previous"
)
