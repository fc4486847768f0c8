package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// streamAnswer is what the scripted model answers, a word every 40 ms (about half a second).
const streamAnswer = "Hello, Ada! It is good to meet you; the sum of two, three and five is ten, and that is all."

const streamScript = `
chunk_ms: 40
rules:
  - reply: {text: "` + streamAnswer + `"}
`

// terminal is the other end of a pseudo-terminal: what was written to it, and when.
type terminal struct {
	tty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	seen map[string]time.Time // first time each watched string showed
}

func newTerminal(t *testing.T, watch ...string) *terminal {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 200}); err != nil {
		t.Fatal(err)
	}
	term := &terminal{tty: tty, seen: map[string]time.Time{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			now := time.Now()
			term.mu.Lock()
			term.out.Write(buf[:n])
			for _, w := range watch {
				if _, ok := term.seen[w]; !ok && strings.Contains(term.out.String(), w) {
					term.seen[w] = now
				}
			}
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { tty.Close(); ptmx.Close(); <-done })
	return term
}

func (term *terminal) text() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return strings.ReplaceAll(term.out.String(), "\r\n", "\n")
}

// streamed fails the test unless last showed on the terminal well after first: the text came
// as the model wrote it. The stream script writes 20 words 40 ms apart, so the last shows about
// 0.8 s after the first; streamed in 50 ms batches, at least half of that is left.
func (term *terminal) streamed(t *testing.T, first, last string) {
	t.Helper()
	term.mu.Lock()
	a, b := term.seen[first], term.seen[last]
	term.mu.Unlock()
	if b.Sub(a) < 400*time.Millisecond {
		t.Fatalf("the first words showed %v before the last: not streamed\n%s", b.Sub(a), term.text())
	}
}

// offlineProject writes an agent with the scripted model (no memory: nothing to install) in a
// temporary folder and makes it the working directory.
func offlineProject(t *testing.T, script string) {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("SKEIN_HOME", filepath.Join(dir, ".skein"))
	t.Setenv("SKEIN_NATS_URL", "")
	t.Setenv("TERM", "xterm")
	if err := os.WriteFile("script.yaml", []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "agent: {name: greeter}\nllm: {provider: scripted, model: scripted, script: script.yaml}\n" +
		"memory: {enabled: false}\nminer: {enabled: false}\n"
	if err := os.WriteFile("agent.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// On a terminal, `skein run` shows the answer as the model writes it: its first words long
// before its last, and the answer once, not again when the session ends.
func TestRunStreamsOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole mesh")
	}
	offlineProject(t, streamScript)
	first, last := "Hello, Ada!", "that is all."
	term := newTerminal(t, first, last)
	if _, errOut, err := runSkein(t, 2*time.Minute, func(c *cobra.Command) { c.SetOut(term.tty) }, "run", "Greet Ada"); err != nil {
		t.Fatalf("skein run: %v\nstdout:\n%s\nstderr:\n%s", err, term.text(), errOut)
	}
	poll.True(t, 10*time.Second, "the summary line on the terminal", func() bool { return strings.Contains(term.text(), "outcome: success") })
	out := term.text()
	if strings.Count(out, streamAnswer) != 1 {
		t.Fatalf("the answer shows %d times, want once:\n%s", strings.Count(out, streamAnswer), out)
	}
	term.streamed(t, first, last)
}

// Not on a terminal (a pipe, a file, --json): the answer prints whole, once, at the end.
func TestRunDoesNotStreamIntoAPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole mesh")
	}
	offlineProject(t, streamScript)
	stdout, stderr, err := runCmd(t, "run", "Greet Ada")
	if err != nil {
		t.Fatalf("skein run: %v\n%s", err, stderr)
	}
	if !strings.HasPrefix(stdout, streamAnswer+"\n\noutcome: success") {
		t.Fatalf("stdout:\n%s", stdout)
	}
}

// `skein chat` on a terminal shows the agent's answer as it is written, after its name, once.
func TestChatStreamsOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole mesh")
	}
	offlineProject(t, streamScript)
	first, last := "greeter> Hello, Ada!", "that is all."
	term := newTerminal(t, first, last)
	onTerminal := func(c *cobra.Command) { c.SetOut(term.tty); c.SetIn(strings.NewReader("Greet Ada\n")) }
	_, errOut, err := runSkein(t, 2*time.Minute, onTerminal, "chat")
	if err != nil {
		t.Fatalf("skein chat: %v\nstdout:\n%s\nstderr:\n%s", err, term.text(), errOut)
	}
	poll.True(t, 10*time.Second, "the answer on the terminal", func() bool { return strings.Contains(term.text(), last) })
	if out := term.text(); strings.Count(out, streamAnswer) != 1 || !strings.Contains(out, "greeter> "+streamAnswer+"\n") {
		t.Fatalf("terminal:\n%s\nstderr:\n%s", out, errOut)
	}
	term.streamed(t, first, last)
}

// A restarted turn is erased from the screen while it is all in sight, and said otherwise; a
// turn shown with a gap does not count as shown.
func TestTextStreamRestartAndGaps(t *testing.T) {
	var b bytes.Buffer
	s := newTextStream(&b, 10, 5, "")
	s.add(protocol.Delta{StepID: "s1", Turn: 1, Seq: 1, Text: "first try that wraps"}) // two rows of 10: one up to its start
	s.add(protocol.Delta{StepID: "s1", Turn: 1, Seq: 2, Restart: true})
	s.add(protocol.Delta{StepID: "s1", Turn: 1, Seq: 3, Text: "again", Done: true})
	if got := b.String(); got != "first try that wraps\r\033[1A\033[Jagain\n" || !s.showed("again") || s.showed("first try that wraps") {
		t.Fatalf("%q", got)
	}
	b.Reset()
	s.add(protocol.Delta{StepID: "s1", Turn: 2, Seq: 1, Text: strings.Repeat("long line ", 6)})
	s.add(protocol.Delta{StepID: "s1", Turn: 2, Seq: 2, Restart: true})
	if got := b.String(); !strings.HasSuffix(got, "\n[the model starts its answer again]\n") {
		t.Fatalf("%q", got)
	}
	s.add(protocol.Delta{StepID: "s1", Turn: 3, Seq: 1, Text: "one "})
	s.add(protocol.Delta{StepID: "s1", Turn: 3, Seq: 3, Text: "three", Done: true})
	if s.showed("one three") {
		t.Fatal("a turn with a gap counted as shown whole")
	}
}
