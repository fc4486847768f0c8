package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// The submit and cancel subjects speak JSON to a caller that says so, answer in the caller's
// encoding, and mark every refusal with the micro service error headers so the service's stats
// count it.
func TestSubmitAndCancelSpeakJSONAndCountRefusals(t *testing.T) {
	f := newFixture(t)
	f.serveSubjects(t, "json-warm")
	ctx := testCtx(t)
	nc := f.mesh.Conn.NC

	send := func(subject, contentType, body string) *nats.Msg {
		t.Helper()
		h := nats.Header{}
		if contentType != "" {
			h.Set(protocol.HeaderContentType, contentType)
		}
		return f.requestRaw(t, subject, h, body)
	}
	jsonReply := func(rep *nats.Msg) map[string]any {
		t.Helper()
		if ct := rep.Header.Get(protocol.HeaderContentType); ct != protocol.ContentTypeJSON {
			t.Errorf("reply Content-Type %q; want %s", ct, protocol.ContentTypeJSON)
		}
		var m map[string]any
		if err := json.Unmarshal(rep.Data, &m); err != nil {
			t.Fatalf("reply is not JSON: %v (%q)", err, rep.Data)
		}
		return m
	}

	rep := send(f.mesh.Names.Submit(), "application/json; charset=utf-8", `{"v":1,"agent":"greeter","task":"Greet Ada","session_id":"json-1"}`)
	if e := rep.Header.Get(micro.ErrorHeader); e != "" {
		t.Fatalf("accepted JSON submit carries a service error: %s", e)
	}
	if m := jsonReply(rep); m["session_id"] != "json-1" || m["v"] != 1.0 || m["error"] != nil {
		t.Errorf("JSON submit reply %v; want session_id json-1, v 1, no error", m)
	}
	if s := f.session(t, "json-1"); s.Task != "Greet Ada" || s.Status != protocol.StatusQueued {
		t.Errorf("JSON submit recorded %+v", s)
	}

	refusals := []struct {
		name, subject, contentType, body string
		code                             protocol.Code
		inBody                           string
	}{
		{"empty task", f.mesh.Names.Submit(), protocol.ContentTypeJSON, `{"v":1,"task":"  "}`, protocol.CodeRejected, "task is empty"},
		{"no version", f.mesh.Names.Submit(), protocol.ContentTypeJSON, `{"task":"Greet Ada"}`, protocol.CodeBadRequest, `send "v": 1`},
		{"misspelt field", f.mesh.Names.Submit(), protocol.ContentTypeJSON, `{"v":1,"task":"Greet Ada","agnet":"greeter"}`, protocol.CodeBadRequest, `unknown field "agnet"`},
		{"not JSON", f.mesh.Names.Submit(), protocol.ContentTypeJSON, `task: Greet Ada`, protocol.CodeBadRequest, "malformed submit request"},
		{"unknown agent", f.mesh.Names.Submit(), protocol.ContentTypeJSON, `{"v":1,"task":"Greet Ada","agent":"nobody"}`, protocol.CodeRejected, `unknown agent "nobody"`},
		{"unknown session", f.mesh.Names.Cancel(), protocol.ContentTypeJSON, `{"v":1,"session_id":"no-such-session"}`, protocol.CodeNotFound, "no such session"},
		{"bad cancel", f.mesh.Names.Cancel(), protocol.ContentTypeJSON, `{"v":1,"session":"json-1"}`, protocol.CodeBadRequest, "malformed cancel request"},
	}
	for _, r := range refusals {
		rep := send(r.subject, r.contentType, r.body)
		if got := rep.Header.Get(micro.ErrorCodeHeader); got != r.code.ServiceCode() {
			t.Errorf("%s: Nats-Service-Error-Code %q; want %q (headers %v)", r.name, got, r.code.ServiceCode(), rep.Header)
		}
		if e := rep.Header.Get(micro.ErrorHeader); !strings.Contains(e, r.inBody) {
			t.Errorf("%s: Nats-Service-Error %q; want it to say %q", r.name, e, r.inBody)
		}
		// The body says the same code as the header, precisely.
		if m := jsonReply(rep); !strings.Contains(m["error"].(string), r.inBody) || m["code"] != string(r.code) {
			t.Errorf("%s: body %v; want error saying %q with code %s", r.name, m, r.inBody, r.code)
		}
	}
	// msgpack callers get msgpack refusals with the same headers; an unknown encoding is 415.
	rep = send(f.mesh.Names.Submit(), "", "not msgpack")
	var mp protocol.SubmitReply
	if err := protocol.Unmarshal(rep.Data, &mp); err != nil || !strings.Contains(mp.Error, "malformed submit request") || mp.Code != protocol.CodeBadRequest {
		t.Errorf("msgpack garbage: reply %+v, %v", mp, err)
	}
	if got := rep.Header.Get(micro.ErrorCodeHeader); got != protocol.CodeBadRequest.ServiceCode() {
		t.Errorf("msgpack garbage: code %q", got)
	}
	rep = send(f.mesh.Names.Submit(), "text/plain", "Greet Ada")
	if got := rep.Header.Get(micro.ErrorCodeHeader); got != protocol.CodeUnsupportedMedia.ServiceCode() || !strings.Contains(rep.Header.Get(micro.ErrorHeader), "application/json") {
		t.Errorf("text/plain: headers %v; want 415 naming the encodings to use", rep.Header)
	}
	if err := protocol.Unmarshal(rep.Data, &mp); err != nil || mp.Code != protocol.CodeUnsupportedMedia {
		t.Errorf("text/plain: reply %+v, %v; want code unsupported_media_type", mp, err)
	}
	wantErrors := len(refusals) + 2

	// A JSON cancel of a live session answers in JSON without an error.
	rep = send(f.mesh.Names.Cancel(), protocol.ContentTypeJSON, `{"v":1,"session_id":"json-1","reason":"test"}`)
	if m := jsonReply(rep); m["status"] != protocol.CancelStatusCancelling || rep.Header.Get(micro.ErrorHeader) != "" {
		t.Errorf("JSON cancel: %v %v", m, rep.Header)
	}

	// The service counts an error just after it has sent the reply, so the count is read until it
	// settles (or the wait's bound), then checked.
	var errs int
	var st micro.Stats
	_ = poll.Wait(5*time.Second, func() error {
		stats, err := nc.RequestWithContext(ctx, "$SRV.STATS."+protocol.ServiceGateway, nil)
		if err != nil {
			return err
		}
		st = micro.Stats{}
		if err := json.Unmarshal(stats.Data, &st); err != nil {
			return err
		}
		errs = 0
		for _, e := range st.Endpoints {
			errs += e.NumErrors
		}
		if errs < wantErrors {
			return fmt.Errorf("%d errors counted", errs)
		}
		return nil
	})
	if errs != wantErrors {
		t.Errorf("micro stats count %d errors; want %d (one per refusal): %+v", errs, wantErrors, st.Endpoints)
	}
}
