package toolhost_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
	"github.com/skein-mesh/skein/toolhost"
)

// testConfig serves two example tools and two test fixtures; everything else in those folders
// stays off, as the allow-list says.
func testConfig(t *testing.T) *config.Config {
	root := devtest.RepoRoot(t)
	cfg := config.Default()
	cfg.Tools.ManifestDirs = []string{
		filepath.Join(root, "examples", "tools"),
		filepath.Join(root, "pkg", "tools", "testdata", "tools"),
	}
	cfg.Tools.Enabled = []string{"echo", "wordcount", "broken", "sleeper", "huge"}
	return cfg
}

type host struct {
	cancel context.CancelFunc
	done   chan error
}

func startHost(t testing.TB, m *bustest.Mesh, cfg *config.Config, id string) *host {
	t.Helper()
	conn := m.Connect(t, id)
	ctx, cancel := context.WithCancel(context.Background())
	h := &host{cancel: cancel, done: make(chan error, 1)}
	go func() {
		h.done <- toolhost.Run(ctx, toolhost.Deps{Conn: conn, Names: m.Names, Config: cfg, HostID: id, Concurrency: 4, ShutdownGrace: 5 * time.Second})
	}()
	t.Cleanup(func() { h.stop(t) })
	return h
}

func (h *host) stop(t testing.TB) {
	t.Helper()
	h.cancel()
	select {
	case err, ok := <-h.done:
		if !ok {
			return // stopped before
		}
		if err != nil {
			t.Errorf("toolhost returned %v", err)
		}
		close(h.done)
	case <-time.After(20 * time.Second):
		t.Fatal("toolhost did not stop")
	}
}

func call(t *testing.T, m *bustest.Mesh, tool, args string, timeout time.Duration) protocol.ToolReply {
	t.Helper()
	rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, protocol.ToolRequest{Tool: tool, Args: json.RawMessage(args)}, timeout)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return rep
}

func TestTwoToolhostsShareTheQueueGroup(t *testing.T) {
	devtest.NeedProgram(t, "python3", "node")
	m := bustest.Start(t)
	cfg := testConfig(t)
	startHost(t, m, cfg, "host-a")
	startHost(t, m, cfg, "host-b")

	// Both hosts answer on the same subjects; keep calling until each has served some, which
	// random queue-group delivery makes certain within a few rounds.
	served := map[string]int{}
	_ = poll.Wait(60*time.Second, func() error {
		if len(served) == 2 {
			return nil
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, protocol.ToolRequest{Tool: "echo", Args: json.RawMessage(`{"text": "hi"}`)}, 30*time.Second)
				if err != nil || !rep.OK || !strings.Contains(string(rep.Result), `"text": "hi"`) && !strings.Contains(string(rep.Result), `"text":"hi"`) {
					t.Errorf("echo: %+v, %v", rep, err)
					return
				}
				mu.Lock()
				served[rep.Host]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		return fmt.Errorf("served by %v", served)
	})
	if served["host-a"] == 0 || served["host-b"] == 0 {
		t.Fatalf("want both toolhosts to serve calls, got %v", served)
	}

	info := discover(t, m)
	if info != 2 {
		t.Errorf("micro discovery shows %d toolhost instances, want 2", info)
	}
}

// discover counts toolhost instances answering micro's $SRV.INFO.
func discover(t *testing.T, m *bustest.Mesh) int {
	t.Helper()
	subj, err := micro.ControlSubject(micro.InfoVerb, protocol.ServiceToolhost, "")
	if err != nil {
		t.Fatal(err)
	}
	inbox := m.Conn.NC.NewInbox()
	sub, err := m.Conn.NC.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := m.Conn.NC.PublishRequest(subj, inbox, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		msg, err := sub.NextMsg(time.Second)
		if err != nil {
			return n
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) == nil && len(info.Endpoints) == len(testConfig(t).Tools.Enabled) {
			for _, e := range info.Endpoints {
				if e.QueueGroup != protocol.QueueToolhost || e.Subject != m.Names.Tool(e.Name) {
					t.Errorf("endpoint %+v: want subject %s in queue group %s", e, m.Names.Tool(e.Name), protocol.QueueToolhost)
				}
			}
			n++
		}
	}
}

func TestCatalogHoldsThePublishedSpecs(t *testing.T) {
	m := bustest.Start(t)
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// New returns only once the catalog is complete, so nothing here polls.
	h, err := toolhost.New(ctx, toolhost.Deps{Conn: m.Connect(t, "host-a"), Names: m.Names, Config: cfg, HostID: "host-a"})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { served <- h.Serve(sctx) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	if got := strings.Join(h.Tools(), ","); got != "broken,echo,huge,sleeper,wordcount" {
		t.Errorf("host serves %s", got)
	}
	specs, err := tools.Catalog(ctx, m.Conn.JS, m.Names, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "broken,echo,huge,sleeper,wordcount" {
		t.Fatalf("catalog = %v, want exactly the enabled tools", names)
	}
	echo := specs[1]
	if !strings.Contains(echo.Description, "text unchanged") || !json.Valid(echo.InputSchema) || !strings.Contains(string(echo.InputSchema), `"required":["text"]`) {
		t.Errorf("echo spec = %+v (%s)", echo, echo.InputSchema)
	}

	some, err := tools.Catalog(ctx, m.Conn.JS, m.Names, []string{"wordcount", "echo"})
	if err != nil || len(some) != 2 || some[0].Name != "echo" || some[1].Name != "wordcount" {
		t.Errorf("allow-listed catalog = %v, %v", some, err)
	}
	some, err = tools.Catalog(ctx, m.Conn.JS, m.Names, []string{"echo", "python_exec"})
	var missing *tools.MissingToolsError
	if !errors.As(err, &missing) || len(missing.Names) != 1 || missing.Names[0] != "python_exec" || len(some) != 1 {
		t.Errorf("want echo plus an error naming python_exec, got %v, %v", some, err)
	}
}

func TestFailuresTravelAsResults(t *testing.T) {
	devtest.NeedProgram(t, "python3")
	m := bustest.Start(t)
	startHost(t, m, testConfig(t), "host-a")

	rep := call(t, m, "broken", `{}`, 30*time.Second)
	if rep.OK || rep.Kind != protocol.ToolErrExit || !strings.Contains(rep.Error, "ZeroDivisionError") || rep.Host != "host-a" ||
		rep.Code != protocol.CodeToolFailed {
		t.Errorf("broken: %+v", rep)
	}
	rep = call(t, m, "echo", `{"text": 5}`, 30*time.Second)
	if rep.OK || rep.Kind != protocol.ToolErrBadArgs || !strings.Contains(rep.Error, "/text") {
		t.Errorf("bad args: %+v", rep)
	}
	// A tool the host does not serve (test-only, not enabled) is unavailable, quickly.
	rep = call(t, m, "flood", `{}`, 2*time.Second)
	if rep.OK || rep.Kind != protocol.ToolErrUnavailable || !strings.Contains(rep.Error, `no toolhost serves tool "flood"`) {
		t.Errorf("not served: %+v", rep)
	}
	// A call that outlives the caller's deadline is reported as a timeout, not retried.
	t.Setenv("SKEIN_TEST_PIDFILE", filepath.Join(t.TempDir(), "pid"))
	rep = call(t, m, "sleeper", `{}`, 300*time.Millisecond)
	if rep.OK || rep.Kind != protocol.ToolErrTimeout {
		t.Errorf("client timeout: %+v", rep)
	}
	// An answer the bus cannot carry (over the server's max_payload) is reported, not dropped.
	rep = call(t, m, "huge", `{}`, 30*time.Second)
	if rep.OK || rep.Kind != protocol.ToolErrTooLarge || !rep.Truncated || !strings.Contains(rep.Error, "NATS message limit") {
		t.Errorf("huge: kind %q error %q", rep.Kind, rep.Error)
	}
	if rep := call(t, m, "bad name", `{}`, time.Second); rep.Kind != protocol.ToolErrUnknown {
		t.Errorf("bad tool name: %+v", rep)
	}
}

func TestMalformedRequestsGetAnErrorReply(t *testing.T) {
	m := bustest.Start(t)
	startHost(t, m, testConfig(t), "host-a")
	call(t, m, "broken", `{"warm": "up"}`, 30*time.Second) // the host is serving

	future, err := msgpack.Marshal(map[string]any{"v": 99, "tool": "echo", "args": []byte(`{"text":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for name, payload := range map[string][]byte{
		"garbage":        []byte("this is not msgpack"),
		"empty":          nil,
		"wrong shape":    {0xa3, 'a', 'b', 'c'}, // a msgpack string where a map belongs
		"future version": future,
	} {
		msg, err := m.Conn.NC.Request(m.Names.Tool("echo"), payload, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var rep protocol.ToolReply
		if err := protocol.Unmarshal(msg.Data, &rep); err != nil {
			t.Fatalf("%s: reply is not a ToolReply: %v", name, err)
		}
		if rep.OK || rep.Kind != protocol.ToolErrBadArgs || !strings.Contains(rep.Error, "malformed tool request for echo") {
			t.Errorf("%s: %+v", name, rep)
		}
		// The code of its kind, in the body and in the service error header.
		if rep.Code != protocol.CodeBadRequest || msg.Header.Get(micro.ErrorCodeHeader) != protocol.CodeBadRequest.ServiceCode() {
			t.Errorf("%s: code %q, headers %v; want bad_request in both", name, rep.Code, msg.Header)
		}
	}
	// The host is still alive and serving.
	if rep := call(t, m, "broken", `{}`, 30*time.Second); rep.Kind != protocol.ToolErrExit {
		t.Errorf("after bad requests: %+v", rep)
	}
}

func TestShutdownStopsServing(t *testing.T) {
	m := bustest.Start(t)
	h := startHost(t, m, testConfig(t), "host-a")
	if rep := call(t, m, "broken", `{}`, 30*time.Second); rep.Host != "host-a" {
		t.Fatalf("not serving: %+v", rep)
	}
	h.stop(t)
	rep := call(t, m, "broken", `{}`, time.Second)
	if rep.Kind != protocol.ToolErrUnavailable {
		t.Errorf("after shutdown: %+v", rep)
	}
}

func TestBadManifestsStopTheHostWithAClearError(t *testing.T) {
	m := bustest.Start(t)
	cfg := config.Default()
	cfg.Tools.ManifestDirs = []string{filepath.Join(devtest.RepoRoot(t), "examples", "tools")}
	cfg.Tools.Enabled = []string{"echo", "python_exec"}
	err := toolhost.Run(context.Background(), toolhost.Deps{Conn: m.Conn, Names: m.Names, Config: cfg})
	if err == nil || !strings.Contains(err.Error(), `"python_exec"`) {
		t.Fatalf("want an error naming python_exec, got %v", err)
	}
}

// A toolhost with every slot taken and no queue refuses a call at once with kind busy (its
// handler never waits for a slot), and tools.Call retries a busy refusal until a slot frees.
func TestFullToolhostRefusesFastAndCallersRetry(t *testing.T) {
	t.Setenv("SKEIN_TEST_PIDFILE", filepath.Join(t.TempDir(), "pid")) // where sleeper writes its child's pid
	m := bustest.Start(t)
	conn := m.Connect(t, "busy-host")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- toolhost.Run(ctx, toolhost.Deps{Conn: conn, Names: m.Names, Config: testConfig(t), HostID: "busy", Concurrency: 1, Queue: -1})
	}()
	t.Cleanup(func() { cancel(); <-done })
	bustest.WaitTools(t, m.Conn, m.Names, "sleeper")

	data, err := protocol.Marshal(&protocol.ToolRequest{Tool: "sleeper", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	// The first request takes the only slot (sleeper runs ~1 s); requests on one connection
	// reach the endpoint in order, so the second finds the slot taken and no queue.
	inbox := m.Conn.NC.NewRespInbox()
	firstReply, err := m.Conn.NC.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Conn.NC.PublishRequest(m.Names.Tool("sleeper"), inbox, data); err != nil {
		t.Fatal(err)
	}
	msg, err := m.Conn.NC.Request(m.Names.Tool("sleeper"), data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var refused protocol.ToolReply
	if err := protocol.Unmarshal(msg.Data, &refused); err != nil {
		t.Fatal(err)
	}
	if refused.OK || refused.Kind != protocol.ToolErrBusy || !strings.Contains(refused.Error, "call sleeper again") {
		t.Fatalf("second call while the only slot was taken: %+v", refused)
	}
	// A caller going through tools.Call is not refused: it retries until the slot is free.
	if second := call(t, m, "sleeper", `{}`, 30*time.Second); second.Kind == protocol.ToolErrBusy {
		t.Fatalf("tools.Call returned a busy refusal: %+v", second)
	}
	if _, err := firstReply.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("first call: %v", err)
	}
}
