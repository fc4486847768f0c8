// Package memory is the guideline model shared by memoryd, the miner and the CLI: the Entry
// type, the Store interface every backend implements, and deterministic entry ids.
package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// Status of an entry (the type lives in protocol, where every wire type is defined).
type Status = protocol.MemoryStatus

const (
	StatusActive     = protocol.MemoryActive
	StatusSuperseded = protocol.MemorySuperseded
	StatusRetired    = protocol.MemoryRetired
	// StatusQuarantined: held back by the lesson gate, never retrieved or promoted.
	StatusQuarantined = protocol.MemoryQuarantined
)

// Source of an entry (see protocol for what each means).
const (
	SourceMiner      = protocol.SourceMiner
	SourceSubagent   = protocol.SourceSubagent
	SourceHuman      = protocol.SourceHuman
	SourceRemembered = protocol.SourceRemembered
)

// Entry is one guideline.
type Entry = protocol.MemoryEntry

// Normalize folds text for id hashing: lower case, single spaces, no trailing punctuation.
func Normalize(text string) string {
	f := strings.Fields(strings.ToLower(text))
	s := strings.Join(f, " ")
	return strings.TrimRightFunc(s, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSpace(r) })
}

// EntryID is the deterministic id of a guideline: a hash of agent, polarity and normalized text.
func EntryID(agent string, p protocol.Polarity, text string) string {
	h := sha256.Sum256([]byte(agent + "\x00" + string(p) + "\x00" + Normalize(text)))
	return hex.EncodeToString(h[:12])
}

// Kinds of entries (see protocol).
const (
	KindGuideline = protocol.KindGuideline
	KindCase      = protocol.KindCase
	KindSkill     = protocol.KindSkill
	// KindAny in a Filter matches every kind.
	KindAny = "*"
)

// Filter narrows a search or listing. Empty fields match everything, except Kind and Status:
// Kind "" matches guidelines only, so code written before cases and skills existed keeps seeing
// guidelines alone; Status "" matches active entries.
type Filter struct {
	Agent    string
	Kind     string // KindGuideline (or ""), KindCase, KindSkill, KindAny
	Tier     protocol.Tier
	Polarity protocol.Polarity
	Tools    []string // match entries tagged with any of these
	Status   Status   // "" means active only; use StatusAny for all
}

// Match reports whether e passes the filter: the one rule every store applies (an entry with no
// status counts as active).
func (f Filter) Match(e *Entry) bool {
	switch f.Status {
	case StatusAny:
	case "":
		if e.Status != StatusActive && e.Status != "" {
			return false
		}
	default:
		if e.Status != f.Status {
			return false
		}
	}
	if f.Agent != "" && e.Agent != f.Agent {
		return false
	}
	if !f.MatchKind(e.KindOf()) {
		return false
	}
	if f.Tier != "" && e.Tier != f.Tier {
		return false
	}
	if f.Polarity != "" && e.Polarity != f.Polarity {
		return false
	}
	if len(f.Tools) > 0 && !slices.ContainsFunc(f.Tools, func(t string) bool { return slices.Contains(e.Tools, t) }) {
		return false
	}
	return true
}

// CheckKind normalises e's kind (a guideline is stored without one) and refuses an unknown one;
// every store calls it before writing.
func CheckKind(e *Entry) error {
	switch e.Kind {
	case KindGuideline:
		e.Kind = ""
	case "", KindCase, KindSkill:
	default:
		return fmt.Errorf("put memory entry %s: unknown kind %q (want guideline, case or skill)", e.ID, e.Kind)
	}
	return nil
}

// MatchKind reports whether an entry of kind k passes the filter's kind.
func (f Filter) MatchKind(k string) bool {
	switch f.Kind {
	case KindAny:
		return true
	case "", KindGuideline:
		return k == KindGuideline || k == ""
	}
	return k == f.Kind
}

// ShownText is every text of an entry a prompt may show, one per line: what the lesson gate
// judges and retrieval's last check reads.
func ShownText(e Entry) string {
	parts := []string{e.Text}
	if c := e.Case; c != nil {
		parts = append(parts, c.Intent, c.Insight)
		for _, s := range c.Approach {
			parts = append(parts, s.Tool+" "+s.Args, s.Error, s.Note)
		}
	}
	if k := e.Skill; k != nil {
		parts = append(append(append(parts, k.Name), k.Preconditions...), k.Pitfalls...)
		for _, s := range k.Steps {
			parts = append(parts, s.Text)
		}
	}
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, "\n")
}

// Clone returns a copy of e that shares no slices with it, so a store never hands out its own.
func Clone(e Entry) Entry {
	e.Tools = slices.Clone(e.Tools)
	e.Sessions = slices.Clone(e.Sessions)
	e.Mined = slices.Clone(e.Mined)
	e.Embedding = slices.Clone(e.Embedding)
	e.Supersedes = slices.Clone(e.Supersedes)
	e.Marks = slices.Clone(e.Marks)
	e.History = slices.Clone(e.History)
	if e.Case != nil {
		c := *e.Case
		c.Approach = slices.Clone(c.Approach)
		e.Case = &c
	}
	if e.Skill != nil {
		s := *e.Skill
		s.Preconditions, s.Steps, s.Pitfalls = slices.Clone(s.Preconditions), slices.Clone(s.Steps), slices.Clone(s.Pitfalls)
		s.Cases, s.Signature = slices.Clone(s.Cases), slices.Clone(s.Signature)
		e.Skill = &s
	}
	return e
}

// StatusAny in a Filter matches every status.
const StatusAny Status = "*"

// Hit is a search result.
type Hit struct {
	// Entry as the search saw it. Its Embedding may be nil (a server store leaves vectors out
	// of search results) and its Revision may trail a concurrent write: Get the entry before
	// changing it.
	Entry Entry
	Score float64 // cosine similarity
}

// ErrNotFound is returned for a missing entry; its code, not_found, crosses the wire with it.
var ErrNotFound error = &protocol.Error{Code: protocol.CodeNotFound, Msg: "memory entry not found"}

// ErrConflict is returned when a compare-and-set write lost to a concurrent writer.
var ErrConflict error = &protocol.Error{Code: protocol.CodeConflict, Msg: "memory entry changed concurrently"}

// ErrModelMismatch is returned when a store holds vectors from a different embedding model.
var ErrModelMismatch = errors.New("memory store was written by a different embedding model")

// Store holds entries and searches them by vector. Every implementation passes the shared
// contract suite in package storetest.
type Store interface {
	// Get returns one entry with its current revision.
	Get(ctx context.Context, id string) (Entry, error)
	// Put writes an entry. With e.Revision == 0 it must not exist yet; otherwise the write succeeds
	// only if the stored revision still equals e.Revision (ErrConflict if not).
	Put(ctx context.Context, e Entry) (Entry, error)
	// Delete removes an entry for good (eviction); supersession is a status change instead.
	Delete(ctx context.Context, id string) error
	// Search returns the k entries most similar to vec that pass the filter, best first.
	Search(ctx context.Context, vec []float32, k int, f Filter) ([]Hit, error)
	// List returns every entry that passes the filter.
	List(ctx context.Context, f Filter) ([]Entry, error)
	// Model is the embedding model id the store was created with.
	Model() string
	Close() error
}
