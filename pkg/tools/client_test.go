package tools_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/tools"
)

func TestPublishAndCatalog(t *testing.T) {
	m := bustest.Start(t)
	ctx := context.Background()
	if specs, err := tools.Catalog(ctx, m.Conn.JS, m.Names, nil); err != nil || len(specs) != 0 {
		t.Fatalf("empty catalog: %v, %v", specs, err)
	}
	in := []protocol.ToolSpec{
		{Name: "sum", Description: "adds", InputSchema: []byte(`{"type":"object"}`)},
		{Name: "echo", Description: "echoes", InputSchema: []byte(`{"type":"object"}`)},
	}
	for i := 0; i < 2; i++ { // publishing again is a no-op
		if err := tools.Publish(ctx, m.Conn.JS, m.Names, in); err != nil {
			t.Fatal(err)
		}
	}
	specs, err := tools.Catalog(ctx, m.Conn.JS, m.Names, nil)
	if err != nil || len(specs) != 2 || specs[0].Name != "echo" || string(specs[1].InputSchema) != `{"type":"object"}` {
		t.Fatalf("catalog = %+v, %v", specs, err)
	}
	kv, err := m.Conn.JS.KeyValue(ctx, m.Names.Bucket(protocol.BucketTools))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "sum"); err != nil || e.Revision() != 1 {
		t.Errorf("sum entry: revision %v, %v (want 1: unchanged specs are not rewritten)", e, err)
	}
	specs, err = tools.Catalog(ctx, m.Conn.JS, m.Names, []string{"sum", "bash"})
	var missing *tools.MissingToolsError
	if !errors.As(err, &missing) || strings.Join(missing.Names, ",") != "bash" || len(specs) != 1 || specs[0].Name != "sum" {
		t.Errorf("allow-list: %+v, %v", specs, err)
	}
}

func TestCallWithoutToolhost(t *testing.T) {
	m := bustest.Start(t)
	rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, protocol.ToolRequest{Tool: "echo", Args: []byte(`{}`)}, 500*time.Millisecond)
	if err != nil || rep.OK || rep.Kind != protocol.ToolErrUnavailable || !strings.Contains(rep.Error, `no toolhost serves tool "echo"`) {
		t.Fatalf("got %+v, %v", rep, err)
	}

	// A toolhost appearing while the caller waits is found: no-responders are retried.
	refused := bustest.Received(t, m.Conn.NC) // the first request's "no responders"
	go func() {
		_ = poll.Wait(10*time.Second, refused)
		reply, _ := protocol.Marshal(&protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true, Result: []byte(`1`)}, Host: "late"})
		_, _ = m.Conn.NC.Subscribe(m.Names.Tool("late"), func(msg *nats.Msg) { _ = msg.Respond(reply) })
	}()
	rep, err = tools.Call(context.Background(), m.Conn.NC, m.Names, protocol.ToolRequest{Tool: "late"}, 10*time.Second)
	if err != nil || !rep.OK || rep.Host != "late" {
		t.Fatalf("late toolhost: %+v, %v", rep, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tools.Call(ctx, m.Conn.NC, m.Names, protocol.ToolRequest{Tool: "echo"}, time.Second); err == nil {
		t.Error("a cancelled caller must get an error, not a tool result")
	}
	if rep := tools.UnknownTool("bash", []string{"sum", "echo"}); rep.Kind != protocol.ToolErrUnknown || !strings.Contains(rep.Error, "available tools: echo, sum") {
		t.Errorf("unknown tool reply: %+v", rep)
	}
}

// fakeHost answers requests on a tool subject with answer(n, msg), n counting from 1.
func fakeHost(t *testing.T, m *bustest.Mesh, tool string, answer func(n int, msg *nats.Msg)) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	sub, err := m.Conn.NC.Subscribe(m.Names.Tool(tool), func(msg *nats.Msg) { go answer(int(n.Add(1)), msg) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := m.Conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

func beat(m *bustest.Mesh, msg *nats.Msg) {
	_ = m.Conn.NC.PublishMsg(&nats.Msg{Subject: msg.Reply, Header: nats.Header{protocol.HeaderCallProgress: []string{"running"}}})
}

func answer(m *bustest.Mesh, msg *nats.Msg, host string) {
	data, _ := protocol.Marshal(&protocol.ToolReply{Host: host, ToolResult: protocol.ToolResult{OK: true, Result: []byte(`1`)}})
	_ = m.Conn.NC.Publish(msg.Reply, data)
}

// A call whose toolhost stops saying it holds the call (it died) is asked for again after
// protocol.CallSilence, with the same reply subject, and the host that takes it answers. A
// call whose toolhost keeps saying so is not asked again, however long it runs.
func TestACallIsAskedAgainOnlyWhenItsToolhostFallsSilent(t *testing.T) {
	m := bustest.Start(t)
	req := func(tool, id string) protocol.ToolRequest {
		return protocol.ToolRequest{Tool: tool, CallID: id, Args: []byte(`{}`)}
	}
	// The first host says it runs the call, then dies; the repeat is taken over.
	asked := fakeHost(t, m, "dies", func(n int, msg *nats.Msg) {
		if msg.Header.Get(protocol.HeaderCallProgress) == "" {
			t.Errorf("request %d did not ask for progress", n)
		}
		if n == 1 {
			beat(m, msg)
			return
		}
		answer(m, msg, "took-over")
	})
	rep, err := tools.Call(context.Background(), m.Conn.NC, m.Names, req("dies", "s.1.t1.c0"), 4*protocol.CallSilence)
	if err != nil || !rep.OK || rep.Host != "took-over" || asked.Load() != 2 {
		t.Fatalf("reply %+v (%v) after %d requests; want the second host's answer to the second request", rep, err, asked.Load())
	}

	// A host that keeps saying it holds the call for three silences, then answers.
	asked = fakeHost(t, m, "slow", func(n int, msg *nats.Msg) {
		// the duration is the point: the call runs for three silences, saying so all along.
		for end := time.Now().Add(3 * protocol.CallSilence); time.Now().Before(end); time.Sleep(protocol.CallProgressEvery) {
			beat(m, msg)
		}
		answer(m, msg, "slow")
	})
	rep, err = tools.Call(context.Background(), m.Conn.NC, m.Names, req("slow", "s.1.t1.c1"), time.Minute)
	if err != nil || !rep.OK || rep.Host != "slow" || asked.Load() != 1 {
		t.Fatalf("reply %+v (%v) after %d requests; want one request, answered", rep, err, asked.Load())
	}

	// A call without an id may not be idempotent: silence is waited out, never asked again.
	asked = fakeHost(t, m, "mute", func(n int, msg *nats.Msg) { beat(m, msg) })
	rep, err = tools.Call(context.Background(), m.Conn.NC, m.Names, protocol.ToolRequest{Tool: "mute", Args: []byte(`{}`)}, 2*protocol.CallSilence)
	if err != nil || rep.Kind != protocol.ToolErrTimeout || asked.Load() != 1 {
		t.Fatalf("reply %+v (%v) after %d requests; want a timeout after one request", rep, err, asked.Load())
	}
}
