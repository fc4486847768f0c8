package tools_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
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
	go func() {
		time.Sleep(200 * time.Millisecond)
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
