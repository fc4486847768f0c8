package bus

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// How an error crosses NATS. A reply that carries an error (protocol.Fault, or a failed
// ToolResult) goes out with the NATS micro service error headers, Nats-Service-Error (why, one
// line) and Nats-Service-Error-Code (its code's ServiceCode, the HTTP status of the same
// failure), and with the reply itself in the body, whose "code" says the same precisely. These
// helpers are the only way a role answers with an error, so no handler picks a status of its
// own; Request and Fault.Err turn what comes back into a *protocol.Error.

// Respond answers a micro request with rep encoded in contentType (protocol.ContentType's
// values), as a service error when rep carries one, so `nats micro stats` counts it.
func Respond(req micro.Request, contentType string, rep protocol.Reply) {
	data, err := protocol.MarshalAs(contentType, rep)
	if err != nil {
		_ = req.Error(protocol.CodeInternal.ServiceCode(), HeaderValue(err.Error()), nil)
		return
	}
	opt := micro.WithHeaders(micro.Headers{protocol.HeaderContentType: {contentType}})
	if e := rep.Err(); e != nil {
		_ = req.Error(protocol.CodeOf(e).ServiceCode(), HeaderValue(e.Error()), data, opt)
		return
	}
	_ = req.Respond(data, opt)
}

// RespondAsync is Respond for a handler that answers after it has returned (its work runs on a
// goroutine of its own): micro reads a request's error when the handler returns, so a later
// answer must not set it (a data race). The service error headers still say what failed; only
// `nats micro stats` does not count it.
func RespondAsync(req micro.Request, contentType string, rep protocol.Reply) {
	h := micro.Headers{protocol.HeaderContentType: {contentType}}
	data, err := protocol.MarshalAs(contentType, rep)
	if err != nil {
		data, h = nil, micro.Headers{}
		h[micro.ErrorHeader] = []string{HeaderValue(err.Error())}
		h[micro.ErrorCodeHeader] = []string{protocol.CodeInternal.ServiceCode()}
	} else if e := rep.Err(); e != nil {
		h[micro.ErrorHeader] = []string{HeaderValue(e.Error())}
		h[micro.ErrorCodeHeader] = []string{protocol.CodeOf(e).ServiceCode()}
	}
	_ = req.Respond(data, micro.WithHeaders(h))
}

// ReplyMsg is rep, already encoded as data, as a message to a request's reply subject, with the
// service error headers when rep carries an error: for replies sent after their micro handler
// has returned (a tool call runs on its own goroutine) or by a plain subscription.
func ReplyMsg(subject string, data []byte, rep protocol.Reply) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: data}
	if e := rep.Err(); e != nil {
		m.Header = nats.Header{
			micro.ErrorHeader:     []string{HeaderValue(e.Error())},
			micro.ErrorCodeHeader: []string{protocol.CodeOf(e).ServiceCode()},
		}
	}
	return m
}

// HeaderValue makes s fit a header value: one line, bounded.
func HeaderValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1024 {
		s = s[:1021] + "..."
	}
	if s == "" {
		s = "error"
	}
	return s
}

// Classify is the code of err for the wire: the code of a *protocol.Error in its chain, else
// what the NATS and JetStream errors in it say (a full store, nothing answering, a deadline, a
// revision conflict), else internal.
func Classify(err error) protocol.Code {
	var (
		pe  *protocol.Error
		api *jetstream.APIError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		return pe.Code
	case IsStorageFull(err):
		return protocol.CodeStorageFull
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining):
		return protocol.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return protocol.CodeTimeout
	case errors.Is(err, context.Canceled):
		return protocol.CodeCancelled
	case errors.Is(err, jetstream.ErrKeyExists),
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return protocol.CodeConflict
	}
	return protocol.CodeInternal
}

// Coded is err with the code Classify gives it, so a handler can return JetStream's and NATS's
// own errors and still answer with a code.
func Coded(err error) error {
	var pe *protocol.Error
	if err == nil || errors.As(err, &pe) {
		return err
	}
	return protocol.Wrap(Classify(err), err)
}
