package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// runCmd runs `skein [args]` in this process with the run and trace commands, as main would, and
// returns its output and error.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runSkein(t, 2*time.Minute, nil, args...)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	code, _ := exitStatus(err)
	return code
}

// serveSubmit answers submits on the mesh with fn, in place of a gateway.
func serveSubmit(t *testing.T, m *bustest.Mesh, fn func(protocol.SubmitRequest) protocol.SubmitReply) {
	t.Helper()
	sub, err := m.Conn.NC.Subscribe(m.Names.Submit(), func(msg *nats.Msg) {
		var in protocol.SubmitRequest
		if err := protocol.Unmarshal(msg.Data, &in); err != nil {
			t.Error(err)
			return
		}
		go func() {
			rep := fn(in)
			data, _ := protocol.Marshal(&rep)
			_ = msg.Respond(data)
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// A submit the mesh cannot take now (a transient error on the wire) exits 75, the "try again"
// status, not 65 as a refused task does: each the exit status of its code.
func TestRunExits75WhenTheSubmitFailsTransiently(t *testing.T) {
	m := bustest.Start(t)
	t.Chdir(t.TempDir())
	serveSubmit(t, m, func(in protocol.SubmitRequest) protocol.SubmitReply {
		if in.Task == "refuse me" {
			return protocol.SubmitReply{Fault: protocol.Fault{Error: "task rejected: empty", Code: protocol.CodeRejected}}
		}
		return protocol.SubmitReply{Fault: protocol.Fault{Error: "enqueue session: maximum messages exceeded", Code: protocol.CodeTransient}}
	})
	_, _, err := runCmd(t, "--nats", m.URL, "run", "--timeout", "2s", "count to three")
	if code := exitCode(err); code != protocol.ExitTempFail || !strings.Contains(err.Error(), "try again") {
		t.Fatalf("transient submit failure: exit %d (%v), want %d saying to try again", code, err, protocol.ExitTempFail)
	}
	_, _, err = runCmd(t, "--nats", m.URL, "run", "--timeout", "2s", "refuse me")
	if code := exitCode(err); code != protocol.ExitDataErr {
		t.Fatalf("refused task: exit %d (%v), want %d", code, err, protocol.ExitDataErr)
	}
}

// `skein run` against a gateway whose first answer comes after the CLI's per-try timeout: the
// CLI submits again with the session id it minted before the first try, so the mesh holds one
// session, not two.
func TestRunWhoseFirstSubmitTimesOutMakesOneSession(t *testing.T) {
	old := submitTry
	submitTry = 500 * time.Millisecond
	t.Cleanup(func() { submitTry = old })
	m := bustest.Start(t)
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := config.Default()
	gw, err := gateway.New(ctx, gateway.Deps{Conn: m.Conn, Names: m.Names, Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	agents, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	spec := protocol.AgentSpec{Name: cfg.Agent.Name, MaxSteps: 5, Updated: time.Now().UTC(), Expires: time.Now().Add(time.Hour).UTC()}
	data, err := protocol.Marshal(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agents.Put(ctx, spec.Name, data); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string
	retried := make(chan struct{})
	serveSubmit(t, m, func(in protocol.SubmitRequest) protocol.SubmitReply {
		mu.Lock()
		ids = append(ids, in.SessionID)
		first := len(ids) == 1
		if len(ids) == 2 {
			close(retried)
		}
		mu.Unlock()
		rep, err := gw.Submit(context.Background(), in)
		if err != nil {
			rep.Error, rep.Code = err.Error(), gateway.ErrorCode(err)
		}
		if first { // the work is done, the answer comes too late: after the CLI has tried again
			select {
			case <-retried:
			case <-t.Context().Done():
			}
		}
		return rep
	})
	// Nothing runs the session: the run gives up following it, after a submit that succeeded.
	_, stderr, err := runCmd(t, "--nats", m.URL, "run", "--timeout", "1s", "count to three")
	if code := exitCode(err); code != protocol.ExitTempFail || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("exit %d (%v), want %d for a session that did not finish after its submit; stderr:\n%s", code, err, protocol.ExitTempFail, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) < 2 || ids[0] == "" || ids[1] != ids[0] {
		t.Fatalf("submits carried session ids %q, want a retry with the id minted before the first try", ids)
	}
	sessions, err := bus.KV(ctx, m.Conn.JS, m.Names, protocol.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := sessions.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != ids[0] {
		t.Fatalf("sessions %v (%v), want only %s", keys, err, ids[0])
	}
}

// `skein trace tail` on a session the mesh has never heard of says so in one line and exits,
// instead of waiting in silence.
func TestTraceTailOnAnUnknownSessionSaysSo(t *testing.T) {
	m := bustest.Start(t)
	t.Chdir(t.TempDir())
	out, _, err := runCmd(t, "--nats", m.URL, "trace", "tail", "no-such-session")
	if code := exitCode(err); code != protocol.ExitNotFound || err.Error() != "skein: no session no-such-session: it is not in the sessions bucket and has no trace events (see `skein trace list`)" {
		t.Fatalf("exit %d, error %q, want %d and the one line saying there is no such session", code, err, protocol.ExitNotFound)
	}
	if out != "" {
		t.Fatalf("printed %q", out)
	}
}

// An embedded run with memory off, or with memory on but memoryd unable to start (no models
// installed), ends at its answer: it never goes on to ask for memoryd or wait for a miner.
func TestEmbeddedRunWithoutMemoryDoesNotWaitForTheMiner(t *testing.T) {
	for _, c := range []struct{ name, memory string }{
		{"memory off", "memory: {enabled: false}\n"},
		{"memoryd cannot start", "memory: {enabled: true}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			t.Setenv("SKEIN_HOME", filepath.Join(dir, ".skein"))
			t.Setenv("SKEIN_NATS_URL", "")
			// No model anywhere: memoryd cannot start when memory is on.
			empty := t.TempDir()
			t.Setenv("SKEIN_TOOLS_DIR", empty)
			t.Setenv("SKEIN_MINILM_DIR", empty)
			t.Setenv("SKEIN_ORT_LIB", filepath.Join(empty, "libonnxruntime.so"))
			t.Setenv("XDG_CACHE_HOME", empty)
			if err := os.WriteFile("script.yaml", []byte("rules:\n  - reply: {text: \"three\"}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := "agent: {name: counter}\nllm: {provider: scripted, model: scripted, script: script.yaml}\n" + c.memory
			if err := os.WriteFile("agent.yaml", []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			var waited int
			old := waitingForMiner
			waitingForMiner = func() bool { waited++; return true }
			t.Cleanup(func() { waitingForMiner = old })
			out, stderr, err := runCmd(t, "run", "--json", "count to three")
			if err != nil {
				t.Fatalf("skein run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
			}
			if !strings.Contains(out, `"final_text":"three"`) {
				t.Fatalf("stdout %s", out)
			}
			if waited != 0 {
				t.Fatalf("the run went on to wait for memoryd and the miner %d time(s) after its answer", waited)
			}
		})
	}
}

// `skein cancel` of a session the gateway does not know exits with the status of the refusal's
// code (not_found: 66), not a status of its own.
func TestCancelOfAnUnknownSessionExitsNotFound(t *testing.T) {
	m := bustest.Start(t)
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- gateway.Run(ctx, gateway.Deps{Conn: m.Conn, Names: m.Names, Config: config.Default(), Logger: slog.New(slog.DiscardHandler), Ready: ready})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("gateway: %v", err)
	}
	t.Cleanup(func() { cancel(); <-done })
	_, _, err := runCmd(t, "--nats", m.URL, "cancel", "no-such-session")
	if code := exitCode(err); code != protocol.ExitNotFound || !strings.Contains(fmt.Sprint(err), "no-such-session") {
		t.Fatalf("cancel of an unknown session: exit %d (%v), want %d", code, err, protocol.ExitNotFound)
	}
}
