package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// A client on the submit subject may write the header's name in any case (NATS keeps it as
// sent), and a refusal says what is wrong in the contract's words, not Go's.
func TestSubmitReadsContentTypeInAnyCaseAndRefusesInUserWords(t *testing.T) {
	f := newFixture(t)
	f.serveSubjects(t, "case-warm")
	send := func(header, value, body string) (map[string]any, nats.Header) {
		t.Helper()
		rep := f.requestRaw(t, f.mesh.Names.Submit(), nats.Header{header: {value}}, body)
		var m map[string]any
		if err := json.Unmarshal(rep.Data, &m); err != nil {
			t.Fatalf("%s: %s: reply is not JSON: %v (%q)", header, body, err, rep.Data)
		}
		return m, rep.Header
	}
	for i, name := range []string{"content-type", "CONTENT-TYPE", "Content-type"} {
		id := []string{"lower", "upper", "mixed"}[i]
		m, h := send(name, "application/json", `{"v":1,"task":"Greet Ada","session_id":"case-`+id+`"}`)
		if m["session_id"] != "case-"+id || m["error"] != nil || h.Get(micro.ErrorHeader) != "" {
			t.Errorf("header %q: reply %v %v; want session case-%s accepted", name, m, h, id)
		}
	}

	m, h := send("content-type", "application/json", `{"v":1,"task":5}`)
	msg, _ := m["error"].(string)
	if h.Get(micro.ErrorCodeHeader) != protocol.CodeBadRequest.ServiceCode() || !strings.Contains(msg, `field "task": got a JSON number, want a string`) {
		t.Errorf("a number as task: %v %v; want 400 naming the field and the kind it takes", m, h)
	}
	if strings.Contains(msg, "protocol.") || strings.Contains(msg, "Go struct") {
		t.Errorf("the refusal shows Go's names: %q", msg)
	}
}
