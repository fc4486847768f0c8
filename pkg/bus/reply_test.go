package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// A micro service that answers through bus.Respond sends a refusal with its reply: the code in
// the body, the same code's status in Nats-Service-Error-Code, counted in the service's stats;
// bus.Request gives the reply back, whose Err is the coded error. A success has no error header.
func TestRespondCarriesTheCodeInBodyAndHeader(t *testing.T) {
	m := bustest.Start(t)
	svc, err := micro.AddService(m.Conn.NC, micro.Config{Name: "codes", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("cancel", micro.HandlerFunc(func(req micro.Request) {
		var in protocol.CancelRequest
		rep := protocol.CancelReply{}
		if err := protocol.UnmarshalChecked(req.Data(), &in); err != nil {
			rep.Fail(err)
		} else if in.SessionID != "known" {
			rep.Fail(fmt.Errorf("cancel: %w", protocol.Errorf(protocol.CodeNotFound, "no session %s", in.SessionID)))
		}
		rep.SessionID = in.SessionID
		bus.Respond(req, protocol.ContentTypeMsgpack, &rep)
	}), micro.WithEndpointSubject("test.cancel"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	data, err := protocol.Marshal(&protocol.CancelRequest{SessionID: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := m.Conn.NC.RequestWithContext(ctx, "test.cancel", data)
	if err != nil {
		t.Fatal(err)
	}
	var raw protocol.CancelReply
	if err := protocol.Unmarshal(msg.Data, &raw); err != nil || raw.Code != protocol.CodeNotFound || raw.Error != "cancel: no session nobody" {
		t.Fatalf("body %+v (%v), want code not_found and the error", raw, err)
	}
	if got := msg.Header.Get(micro.ErrorCodeHeader); got != "404" || msg.Header.Get(micro.ErrorHeader) != raw.Error {
		t.Fatalf("headers %v, want 404 and the error", msg.Header)
	}

	var rep protocol.CancelReply
	if err := bus.Request(ctx, m.Conn.NC, "test.cancel", &protocol.CancelRequest{SessionID: "nobody"}, &rep, time.Second); err != nil {
		t.Fatalf("a refusal with its reply is no transport error: %v", err)
	}
	if protocol.CodeOf(rep.Err()) != protocol.CodeNotFound || rep.SessionID != "nobody" {
		t.Fatalf("reply %+v", rep)
	}
	// An id the door refuses: too_large, before anything reads it.
	rep = protocol.CancelReply{}
	long := protocol.CancelRequest{SessionID: strings.Repeat("a", protocol.MaxSessionID+1)}
	if err := bus.Request(ctx, m.Conn.NC, "test.cancel", &long, &rep, time.Second); err != nil || protocol.CodeOf(rep.Err()) != protocol.CodeTooLarge {
		t.Fatalf("long id: %v, reply %+v", err, rep.Fault)
	}

	data, _ = protocol.Marshal(&protocol.CancelRequest{SessionID: "known"})
	msg, err = m.Conn.NC.RequestWithContext(ctx, "test.cancel", data)
	if err != nil || msg.Header.Get(micro.ErrorHeader) != "" {
		t.Fatalf("a success carries an error header: %v %v", msg.Header, err)
	}
	if st := svc.Stats(); st.Endpoints[0].NumErrors != 3 {
		t.Errorf("the service counted %d errors, want 3", st.Endpoints[0].NumErrors)
	}
}

// What a caller gets when no reply says it: a bare service error reads as its status's code, a
// reply body without a code takes the header's, and nothing answering is unavailable.
func TestRequestCodesWhatHasNoReply(t *testing.T) {
	m := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bare, err := m.Conn.NC.Subscribe("test.bare", func(msg *nats.Msg) {
		_ = msg.RespondMsg(&nats.Msg{Header: nats.Header{micro.ErrorHeader: {"slow down"}, micro.ErrorCodeHeader: {"429"}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Unsubscribe() })
	var rep protocol.Ack
	err = bus.Request(ctx, m.Conn.NC, "test.bare", &protocol.FeedbackRequest{}, &rep, time.Second)
	if protocol.CodeOf(err) != protocol.CodeTooMany {
		t.Fatalf("bare 429: %v (%s), want too_many_requests", err, protocol.CodeOf(err))
	}

	old, err := m.Conn.NC.Subscribe("test.old", func(msg *nats.Msg) {
		data, _ := protocol.Marshal(&protocol.Ack{})
		_ = msg.RespondMsg(&nats.Msg{Data: data, Header: nats.Header{micro.ErrorHeader: {"gone"}, micro.ErrorCodeHeader: {"404"}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Unsubscribe() })
	rep = protocol.Ack{}
	if err := bus.Request(ctx, m.Conn.NC, "test.old", &protocol.FeedbackRequest{}, &rep, time.Second); err != nil || protocol.CodeOf(rep.Err()) != protocol.CodeNotFound {
		t.Fatalf("reply without a code: %v, %+v", err, rep)
	}

	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	err = bus.Request(short, m.Conn.NC, "test.nobody", &protocol.FeedbackRequest{}, &rep, 100*time.Millisecond)
	if protocol.CodeOf(err) != protocol.CodeUnavailable || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nobody answering: %v (%s), want unavailable", err, protocol.CodeOf(err))
	}
}

// ReplyMsg, for replies sent outside a micro handler, sets the same headers from the same code.
func TestReplyMsgSetsTheHeadersOfAFailedReply(t *testing.T) {
	ok := &protocol.ToolReply{ToolResult: protocol.ToolResult{OK: true}}
	if m := bus.ReplyMsg("_INBOX.x", nil, ok); m.Header != nil {
		t.Errorf("a success has headers %v", m.Header)
	}
	failed := &protocol.ToolReply{ToolResult: protocol.ToolResult{Kind: protocol.ToolErrExit, Error: "exit status 1\nTraceback"}}
	m := bus.ReplyMsg("_INBOX.x", nil, failed)
	if m.Header.Get(micro.ErrorCodeHeader) != "502" || m.Header.Get(micro.ErrorHeader) != "exit status 1 Traceback" {
		t.Errorf("a failed tool call has headers %v, want 502 and its error on one line", m.Header)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want protocol.Code
	}{
		{fmt.Errorf("x: %w", protocol.Errorf(protocol.CodeRejected, "no")), protocol.CodeRejected},
		{fmt.Errorf("publish: %w", &jetstream.APIError{ErrorCode: 10047}), protocol.CodeStorageFull},
		{fmt.Errorf("ask: %w", nats.ErrNoResponders), protocol.CodeUnavailable},
		{fmt.Errorf("ask: %w", context.DeadlineExceeded), protocol.CodeTimeout},
		{context.Canceled, protocol.CodeCancelled},
		{fmt.Errorf("update: %w", jetstream.ErrKeyExists), protocol.CodeConflict},
		{errors.New("something else"), protocol.CodeInternal},
	} {
		if got := bus.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if bus.Coded(nil) != nil || protocol.CodeOf(bus.Coded(nats.ErrNoResponders)) != protocol.CodeUnavailable {
		t.Error("Coded")
	}
}
