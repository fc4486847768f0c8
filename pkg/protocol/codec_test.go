package protocol

import (
	"errors"
	"strings"
	"testing"
)

// A refusal is read by whoever sent the message, often from another language: it names the
// message and the field as the contract does, never a Go type.
func TestDecodeErrorsSpeakTheContractsWords(t *testing.T) {
	cases := []struct {
		name, contentType, body string
		want                    []string
	}{
		{"wrong type", ContentTypeJSON, `{"v":1,"task":5}`, []string{"submit request", `field "task"`, "got a JSON number, want a string"}},
		{"nested field", ContentTypeJSON, `{"v":1,"task":"x","budget":{"max_usd":"lots"}}`, []string{`field "budget.max_usd"`, "want a number"}},
		{"integer", ContentTypeJSON, `{"v":1,"task":"x","depth":1.5}`, []string{`field "depth"`, "want an integer"}},
		{"not an object", ContentTypeJSON, `["task"]`, []string{"submit request", "got a JSON array, want an object"}},
		{"unknown field", ContentTypeJSON, `{"v":1,"task":"x","agnet":"a"}`, []string{`unknown field "agnet"`}},
		{"syntax", ContentTypeJSON, `{"v":1,"task":}`, []string{"not valid JSON at byte", "invalid character"}},
		{"truncated", ContentTypeJSON, `{"v":1,"task":"x"`, []string{"ends too early"}},
		{"empty", ContentTypeJSON, ``, []string{"the body is empty"}},
		{"two values", ContentTypeJSON, `{"v":1,"task":"x"} {}`, []string{"more than one JSON value"}},
		{"version", ContentTypeJSON, `{"task":"x"}`, []string{"unsupported schema version 0", `send "v": 1`}},
		{"JSON sent as msgpack", ContentTypeMsgpack, `{"v":1,"task":"x"}`, []string{"not msgpack", "looks like JSON", "Content-Type: application/json"}},
		{"garbage as msgpack", ContentTypeMsgpack, "\xc1\xc1", []string{"submit request: the body is not valid msgpack"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m SubmitRequest
			err := UnmarshalAs(c.contentType, []byte(c.body), &m)
			if err == nil {
				t.Fatalf("%q decoded without an error: %+v", c.body, m)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
			for _, goism := range []string{"protocol.", "*", "Go struct", "SubmitRequest", "json:", "msgpack:"} {
				if strings.Contains(msg, goism) {
					t.Errorf("error %q shows %q, a Go detail", msg, goism)
				}
			}
		})
	}
	var m SubmitRequest
	if err := UnmarshalAs(ContentTypeJSON, []byte(`{"v":2,"task":"x"}`), &m); !errors.Is(err, ErrVersion) {
		t.Errorf("a version error %v does not wrap ErrVersion", err)
	}
}

func TestMessageNamesInWords(t *testing.T) {
	for m, want := range map[Message]string{
		&SubmitRequest{}: "submit request", &MemoryInspectRequest{}: "memory inspect request", &Event{}: "event",
	} {
		if got := what(m); got != want {
			t.Errorf("what(%T) = %q, want %q", m, got, want)
		}
	}
}

// NATS keeps header names as the sender wrote them; the Content-Type a client sends is found in
// any case.
func TestHeaderValueIgnoresTheNamesCase(t *testing.T) {
	for _, h := range []map[string][]string{
		{"Content-Type": {ContentTypeJSON}}, {"content-type": {ContentTypeJSON}}, {"CONTENT-TYPE": {ContentTypeJSON}},
	} {
		if got := HeaderValue(h, HeaderContentType); got != ContentTypeJSON {
			t.Errorf("HeaderValue(%v) = %q", h, got)
		}
	}
	if got := HeaderValue(map[string][]string{"Content-Length": {"3"}}, HeaderContentType); got != "" {
		t.Errorf("a missing header reads %q", got)
	}
}
