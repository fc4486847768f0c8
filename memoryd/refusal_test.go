package memoryd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// anyReply reads the error part of any memoryd reply.
type anyReply struct {
	protocol.Header
	protocol.Fault
}

// Every memoryd refusal is its operation's reply with the code in the body, sent with the same
// code's status in Nats-Service-Error-Code; the client gives it back as a coded error.
func TestRefusalsCarryTheirCodeInBodyAndHeader(t *testing.T) {
	m := bustest.Start(t)
	c := start(t, m, embedtest.Hash{}, nil)
	ctx := ctxT(t)
	cases := []struct {
		name, op string
		req      protocol.Message
		raw      []byte // sent as it is when set
		code     protocol.Code
	}{
		{"unknown entry", protocol.MemGet, &protocol.MemoryGetRequest{ID: "no-such-entry"}, nil, protocol.CodeNotFound},
		{"retire an unknown entry", protocol.MemRetire, &protocol.MemoryRetireRequest{ID: "no-such-entry"}, nil, protocol.CodeNotFound},
		{"id over its length", protocol.MemGet, &protocol.MemoryGetRequest{ID: strings.Repeat("a", protocol.MaxMemoryID+1)}, nil, protocol.CodeTooLarge},
		{"malformed id", protocol.MemGet, &protocol.MemoryGetRequest{ID: "a.b"}, nil, protocol.CodeBadRequest},
		{"query over its length", protocol.MemInspect, &protocol.MemoryInspectRequest{Query: strings.Repeat("q", protocol.MaxQueryBytes+1)}, nil, protocol.CodeTooLarge},
		{"unknown source", protocol.MemRemember, &protocol.RememberRequest{Agent: "demo", SessionID: "s-1", Source: "someone",
			Notes: []protocol.RememberNote{{Text: "x"}}}, nil, protocol.CodeBadRequest},
		{"unreadable body", protocol.MemRetrieve, nil, []byte("not msgpack"), protocol.CodeBadRequest},
	}
	for _, tc := range cases {
		data := tc.raw
		if tc.req != nil {
			var err error
			if data, err = protocol.Marshal(tc.req); err != nil {
				t.Fatal(err)
			}
		}
		msg, err := m.Conn.NC.RequestWithContext(ctx, m.Names.Memory(tc.op), data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var rep anyReply
		if err := protocol.Unmarshal(msg.Data, &rep); err != nil || rep.Code != tc.code || rep.Error == "" {
			t.Errorf("%s: body %+v (%v), want code %s", tc.name, rep, err, tc.code)
		}
		if got := msg.Header.Get(micro.ErrorCodeHeader); got != tc.code.ServiceCode() || msg.Header.Get(micro.ErrorHeader) == "" {
			t.Errorf("%s: headers %v, want Nats-Service-Error-Code %s", tc.name, msg.Header, tc.code.ServiceCode())
		}
	}
	// The client hands the code on: a caller decides on it, not on the text.
	if _, err := c.Get(ctx, "no-such-entry"); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Errorf("client get of an unknown entry: %v (code %s)", err, protocol.CodeOf(err))
	}
	// A success has no error header.
	data, _ := protocol.Marshal(&protocol.MemoryHealthRequest{})
	msg, err := m.Conn.NC.Request(m.Names.Memory(protocol.MemHealth), data, 10*time.Second)
	if err != nil || msg.Header.Get(micro.ErrorHeader) != "" {
		t.Errorf("health: %v headers %v", err, msg.Header)
	}
}
