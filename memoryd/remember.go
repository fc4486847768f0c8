package memoryd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/skein-mesh/skein/pkg/memory"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/redact"
)

// remember stores notes written inside a session (an agent's remember calls, a sub-agent's
// findings) through the ingest rules mined candidates follow: redacted, refused over the
// guideline length cap, through the lesson gate (rejected, quarantined or stored normalised),
// tactical, counted once per (session, key), merged into a similar entry, promoted on evidence
// from distinct sessions and a helpful mark.
func (s *server) remember(ctx context.Context, data []byte, rep *protocol.RememberReply) error {
	var req protocol.RememberRequest
	if err := decode(data, &req); err != nil {
		return err
	}
	if err := s.staleErr(); err != nil {
		return err
	}
	if err := checkRemember(&req); err != nil {
		return err
	}
	rep.Actions = make([]protocol.IngestAction, 0, len(req.Notes))
	var failed error // the first note that could not be stored
	for _, n := range req.Notes {
		key := n.Key
		if key == "" {
			key = NoteKey(n.Text)
		}
		text := strings.TrimSpace(redact.String(n.Text))
		switch {
		case len(n.Text) > retrieve.MaxGuidelineChars:
			rep.Actions = append(rep.Actions, protocol.IngestAction{Key: key, Action: "refused",
				Detail: fmt.Sprintf("the note is %d bytes; at most %d: say it shorter", len(n.Text), retrieve.MaxGuidelineChars)})
			continue
		case text == "":
			rep.Actions = append(rep.Actions, protocol.IngestAction{Key: key, Action: "refused", Detail: "the note is empty"})
			continue
		}
		c := protocol.Candidate{Text: text, Polarity: protocol.PolarityPattern, Key: key, Source: req.Source, SourceAgent: req.SourceAgent}
		act, err := s.eng.IngestOne(ctx, req.Agent, req.SessionID, c)
		if err != nil {
			act = protocol.IngestAction{Key: key, Action: "error", Detail: err.Error()}
			if failed == nil {
				failed = err
			}
		}
		s.log.Info("remember", "agent", req.Agent, "session", req.SessionID, "source", req.Source, "from", req.SourceAgent,
			"key", act.Key, "entry", act.EntryID, "action", act.Action, "detail", act.Detail)
		rep.Actions = append(rep.Actions, act)
	}
	return failed
}

// NoteKey is the key of a note sent without one: the same text from the same session is one note.
func NoteKey(text string) string {
	h := sha256.Sum256([]byte(memory.Normalize(text)))
	return "note:" + hex.EncodeToString(h[:8])
}

// checkRemember refuses a request that cannot be stored as it is (bad_request, or the code of a
// bad id).
func checkRemember(req *protocol.RememberRequest) error {
	if err := protocol.IDAgent.Check(req.Agent); err != nil {
		return fmt.Errorf("remember: %w", err)
	}
	if err := protocol.IDSession.Check(req.SessionID); err != nil {
		return fmt.Errorf("remember: %w", err)
	}
	switch req.Source {
	case protocol.SourceRemembered:
		req.SourceAgent = ""
	case protocol.SourceSubagent:
		if err := protocol.IDAgent.Check(req.SourceAgent); err != nil {
			return fmt.Errorf("remember: %w", err)
		}
	default:
		return protocol.Errorf(protocol.CodeBadRequest, "remember: source must be %s or %s, got %q", protocol.SourceRemembered, protocol.SourceSubagent, req.Source)
	}
	if len(req.Notes) == 0 || len(req.Notes) > protocol.MaxRememberNotes {
		return protocol.Errorf(protocol.CodeBadRequest, "remember: %d notes; send 1 to %d", len(req.Notes), protocol.MaxRememberNotes)
	}
	for _, n := range req.Notes {
		if len(n.Key) > protocol.MaxNoteKey {
			return protocol.Errorf(protocol.CodeTooLarge, "remember: a note key is %d bytes; at most %d", len(n.Key), protocol.MaxNoteKey)
		}
	}
	return nil
}
