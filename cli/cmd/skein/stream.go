package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/skein-mesh/skein/pkg/delta"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// textStream shows the model's text on a terminal as it is generated (the session's deltas):
// each model turn on its own lines, a restarted turn erased (or, when it has scrolled out of
// sight, marked), and it remembers what it showed, so the answer is not printed a second time
// when the session ends.
type textStream struct {
	mu     sync.Mutex
	out    io.Writer
	prefix string // before each turn's text ("assistant> " in chat)
	// before runs ahead of the first text of a turn (the live status line clears itself).
	before func()
	shown  delta.Shown
	turns  map[delta.Key]delta.TurnText
	cur    delta.Key
	open   bool // a turn's text is being written: its line is not finished
	// rows and col place the cursor since the turn's first character, to erase it on restart.
	rows, col     int
	width, height int
}

// terminalOut reports whether w is a terminal that shows streamed text: `skein run` and `chat`
// stream only there (not into a pipe or a file, and not with --json).
func terminalOut(w io.Writer) (width, height int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile || !term.IsTerminal(int(f.Fd())) || os.Getenv("TERM") == "dumb" {
		return 0, 0, false
	}
	width, height, err := term.GetSize(int(f.Fd()))
	if err != nil || width <= 0 || height <= 0 {
		width, height = 80, 24
	}
	return width, height, true
}

func newTextStream(out io.Writer, width, height int, prefix string) *textStream {
	return &textStream{out: out, prefix: prefix, width: width, height: height, turns: map[delta.Key]delta.TurnText{}}
}

// add shows one delta.
func (s *textStream) add(d protocol.Delta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := delta.Key{Step: d.StepID, Turn: d.Turn}
	s.turns[k] = s.shown.Add(d)
	if k != s.cur {
		s.endLocked()
		s.cur = k
	}
	if d.Restart && s.open {
		s.eraseLocked()
	}
	if d.Text != "" {
		if !s.open {
			if s.before != nil {
				s.before()
			}
			s.open, s.rows, s.col = true, 0, 0
			s.writeLocked(s.prefix)
		}
		s.writeLocked(d.Text)
	}
	if d.Done {
		s.endLocked()
	}
}

// writeLocked writes text and follows the cursor (a character per cell, the terminal wrapping
// at its width).
func (s *textStream) writeLocked(text string) {
	fmt.Fprint(s.out, text)
	for _, r := range text {
		if r == '\n' {
			s.rows, s.col = s.rows+1, 0
			continue
		}
		if utf8.RuneLen(r) > 0 {
			s.col++
		}
		if s.col > s.width {
			s.rows, s.col = s.rows+1, 1
		}
	}
}

// eraseLocked removes the turn's text from the screen when all of it is still in sight; else it
// says on a new line that the answer starts again.
func (s *textStream) eraseLocked() {
	if s.rows < s.height-1 {
		if s.rows > 0 {
			fmt.Fprintf(s.out, "\r\033[%dA\033[J", s.rows)
		} else {
			fmt.Fprint(s.out, "\r\033[K")
		}
	} else {
		fmt.Fprint(s.out, "\n[the model starts its answer again]\n")
	}
	s.open = false
}

// endLocked finishes the line of the turn being written.
func (s *textStream) endLocked() {
	if s.open {
		if s.col > 0 {
			fmt.Fprintln(s.out)
		}
		s.open = false
	}
}

// idle runs f unless a turn's text is being written (f draws on the same terminal).
func (s *textStream) idle(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		f()
	}
}

// end finishes the line being written, if any.
func (s *textStream) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked()
}

// showed reports whether text (a turn's whole answer) was shown, every piece of it.
func (s *textStream) showed(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	text = strings.TrimSpace(text)
	if text == "" {
		return false
	}
	for _, t := range s.turns {
		if t.Done && !t.Gap && strings.TrimSpace(t.Text) == text {
			return true
		}
	}
	return false
}
