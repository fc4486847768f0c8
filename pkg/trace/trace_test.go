package trace_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/trace"
)

func session(id string) []protocol.Event {
	cost := 0.25
	return []protocol.Event{
		{SessionID: id, Type: protocol.EvSessionStarted, Agent: "a", Task: "count the words"},
		{SessionID: id, Type: protocol.EvToolCall, Tool: "wordcount", Args: json.RawMessage(`{"text":"x"}`),
			Result: &protocol.ToolResult{OK: false, Kind: protocol.ToolErrExit, Error: "boom"}},
		{SessionID: id, Type: protocol.EvFinal, Outcome: protocol.OutcomeSuccessWithRecovery, Text: "1 word"},
		{SessionID: id, Type: protocol.EvUsage, Report: &protocol.UsageReport{Usage: protocol.Usage{InputTokens: 10}, CostUSD: &cost}},
	}
}

func publish(t *testing.T, m *bustest.Mesh, evs []protocol.Event) {
	t.Helper()
	p := trace.NewPublisher(m.Conn.JS, m.Names, "test")
	for _, ev := range evs {
		if err := p.Emit(ev); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReadFollowAndListSeeEventsInOrder(t *testing.T) {
	m := bustest.Start(t)
	publish(t, m, session("s-1"))
	publish(t, m, session("s-2")[:2]) // still running
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	evs, err := trace.Read(ctx, m.Conn.JS, m.Names, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, string(ev.Type))
		if ev.Source != "test" || ev.Time.IsZero() || ev.V != protocol.SchemaVersion {
			t.Fatalf("event not stamped: %+v", ev)
		}
	}
	if got := strings.Join(types, ","); got != "session_started,tool_call,final,usage" {
		t.Fatalf("read %s", got)
	}

	var followed int
	if err := trace.Follow(ctx, m.Conn.JS, m.Names, "s-1", func(ev protocol.Event) bool {
		followed++
		return ev.Type != protocol.EvUsage
	}); err != nil {
		t.Fatal(err)
	}
	if followed != 4 {
		t.Fatalf("followed %d events", followed)
	}

	list, err := trace.List(ctx, m.Conn.JS, m.Names, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].SessionID != "s-1" || list[0].Outcome != protocol.OutcomeSuccessWithRecovery ||
		list[0].Task != "count the words" || list[0].Events != 4 || list[1].Outcome != "" {
		t.Fatalf("list = %+v", list)
	}

	// Readers leave nothing on the server: a role reads or follows every session, so a consumer
	// left per read would pile up until the stream's consumer limit stalls the mesh.
	for i := 0; i < 20; i++ {
		if _, err := trace.Read(ctx, m.Conn.JS, m.Names, "s-1"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := m.Conn.JS.Stream(ctx, m.Names.Stream(protocol.StreamTrace))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left on the trace stream after reading and following", info.State.Consumers)
	}
}

// mirrorConsumer waits for the mirror's durable consumer to exist and returns its info.
func mirrorConsumer(t *testing.T, m *bustest.Mesh) *jetstream.ConsumerInfo {
	t.Helper()
	var info *jetstream.ConsumerInfo
	poll.Eventually(t, 10*time.Second, "the mirror's consumer", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := m.Conn.JS.Consumer(ctx, m.Names.Stream(protocol.StreamTrace), protocol.ConsumerMirror)
		if err != nil {
			return err
		}
		info, err = c.Info(ctx)
		return err
	})
	return info
}

func TestMirrorWritesJSONLAndLogAndSignalsTheEnd(t *testing.T) {
	m := bustest.Start(t)
	home := t.TempDir()
	mirror := &trace.Mirror{Conn: m.Conn, Names: m.Names, Home: home, Logger: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mirror.Run(ctx) }()
	defer func() { cancel(); <-done }()
	finished := mirror.Done("s-9")
	// The mirror starts at new events: publish once its durable consumer exists.
	mirrorConsumer(t, m)
	publish(t, m, session("s-9"))
	poll.Receive(t, 10*time.Second, "the mirror to signal the session's usage event", finished)

	f, err := os.Open(trace.JSONLPath(home, "s-9"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last protocol.Event
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("line %d is not JSON: %v", n, err)
		}
	}
	if n != 4 || last.Type != protocol.EvUsage || last.Report == nil || last.Report.InputTokens != 10 {
		t.Fatalf("jsonl: %d lines, last %+v", n, last)
	}
	log, err := os.ReadFile(trace.LogPath(home, "s-9"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tool_call", "wordcount", "FAILED nonzero_exit: boom", "cost=$0.250000"} {
		if !strings.Contains(string(log), want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(home, "traces", "*")); len(matches) != 1 {
		t.Fatalf("trace files: %v", matches)
	}
	// Traces hold task text and tool output: the mesh's user only.
	for _, p := range []string{trace.JSONLPath(home, "s-9"), trace.LogPath(home, "s-9")} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v %v, want 0600", p, st.Mode().Perm(), err)
		}
		if st, err := os.Stat(filepath.Dir(p)); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v %v, want 0700", filepath.Dir(p), st.Mode().Perm(), err)
		}
	}
}

// The mirror runs on the mesh's one worker with the consumer table's settings: a trace event it
// cannot decode reaches the DLQ with its reason (it used to be terminated and lost), and the
// events after it are still mirrored.
func TestMirrorRunsOnTheWorkerAndDeadLettersGarbage(t *testing.T) {
	m := bustest.Start(t)
	home := t.TempDir()
	mirror := &trace.Mirror{Conn: m.Conn, Names: m.Names, Home: home, AckWait: 3 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mirror.Run(ctx) }()
	defer func() { cancel(); <-done }()
	finished := mirror.Done("s-7")
	info := mirrorConsumer(t, m)
	want, err := bus.Consumers(m.Names, bus.KindMirror, "", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.AckWait != want.Config.AckWait || info.Config.MaxDeliver != want.Config.MaxDeliver ||
		info.Config.MaxAckPending != want.Config.MaxAckPending || info.Config.DeliverPolicy != jetstream.DeliverNewPolicy {
		t.Fatalf("mirror consumer %+v, want the table's %+v", info.Config, want.Config)
	}

	if _, err := m.Conn.JS.Publish(ctx, m.Names.Trace("s-7"), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	publish(t, m, session("s-7"))
	poll.Receive(t, 10*time.Second, "the mirror to signal the session's usage event", finished)
	letters := bustest.DeadLetters(t, m.Conn, m.Names, 1)
	got := letters[len(letters)-1]
	if r := got.Header.Get(bus.HeaderDLQReason); !strings.Contains(r, "undecodable") || string(got.Data) != "not an event" ||
		got.Header.Get(bus.HeaderDLQSubject) != m.Names.Trace("s-7") {
		t.Fatalf("dead letter %q reason %q headers %v", got.Data, r, got.Header)
	}
	if b, err := os.ReadFile(trace.JSONLPath(home, "s-7")); err != nil || strings.Count(string(b), "\n") != 4 {
		t.Fatalf("jsonl after the garbage: %v\n%s", err, b)
	}
}

// What tools and models said is redacted before it is stored: arguments, results, errors,
// stderr, text. The caller's result is not changed.
func TestEmitRedactsSecrets(t *testing.T) {
	m := bustest.Start(t)
	key := "sk-ant-api03-TESTKEY0123456789"
	res := &protocol.ToolResult{OK: false, Kind: protocol.ToolErrExit, Error: "401: bad key " + key,
		Stderr: "curl -H 'Authorization: Bearer abcdefghijklmnop'\npassword=hunter2hunter2", Result: json.RawMessage(`{"echo":"` + key + `"}`)}
	publish(t, m, []protocol.Event{
		{SessionID: "r-1", Type: protocol.EvToolCall, Tool: "http", Args: json.RawMessage(`{"url":"https://bob:pw-secret-1@api.example/x","api_key":"k-123"}`), Result: res},
		{SessionID: "r-1", Type: protocol.EvFinal, Text: "The key is " + key, Reason: "nats://u:natspass99@h:4222 refused"},
	})
	if !strings.Contains(res.Error, key) {
		t.Fatalf("Emit changed the caller's result: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := trace.Read(ctx, m.Conn.JS, m.Names, "r-1")
	if err != nil || len(evs) != 2 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	stored, _ := json.Marshal(evs)
	for _, secret := range []string{key, "abcdefghijklmnop", "hunter2hunter2", "pw-secret-1", "k-123", "natspass99"} {
		if strings.Contains(string(stored), secret) {
			t.Errorf("%q reached the trace: %s", secret, stored)
		}
	}
	if !json.Valid(evs[0].Args) || !strings.Contains(string(stored), "401: bad key") {
		t.Errorf("redaction lost the rest: %s", stored)
	}
}

func TestLineMarksUnknownCost(t *testing.T) {
	line := trace.Line(protocol.Event{Type: protocol.EvUsage, Report: &protocol.UsageReport{}})
	if !strings.Contains(line, "cost=unknown") {
		t.Fatalf("an unpriced model's cost must read unknown, never $0: %s", line)
	}
}
