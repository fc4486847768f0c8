package contract

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/protocol"
)

var update = flag.Bool("update", false, "rewrite docs/asyncapi.json from the Go types")

const docPath = "../../../docs/asyncapi.json"

// The committed document is what the Go types say; `make contract` rewrites it.
func TestAsyncAPIDocumentIsCurrent(t *testing.T) {
	got, err := AsyncAPI()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(docPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("%v (write it with `make contract`)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/asyncapi.json is not what the pkg/protocol types say: run `make contract` and commit it")
	}
}

// Every type of pkg/protocol that is a message (embeds Header) is on a channel, so a message
// added later cannot be left out of the document.
func TestEveryMessageTypeIsOnAChannel(t *testing.T) {
	listed := map[string]bool{}
	for _, c := range Channels() {
		listed[reflect.TypeOf(c.Message).Name()] = true
		if c.Reply != nil {
			listed[reflect.TypeOf(c.Reply).Name()] = true
		}
	}
	found := 0
	for typ, fl := range devtest.StructFields(t, "..") {
		if id, ok := fl.Type.(*ast.Ident); ok && len(fl.Names) == 0 && id.Name == "Header" {
			found++
			if !listed[typ] {
				t.Errorf("protocol.%s is a message on no channel of Channels()", typ)
			}
		}
	}
	if found < 20 {
		t.Fatalf("found %d message types in pkg/protocol; the scan is broken", found)
	}
}

// Each message, empty and with every field set, is written by Go in msgpack and in JSON and then
// read with the published document alone: the msgpack form through the document's decoding rules.
func TestMessagesRoundTripThroughTheDocument(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ReadDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Channels() {
		for _, v := range []any{c.Message, c.Reply} {
			if v == nil {
				continue
			}
			name := reflect.TypeOf(v).Name()
			for _, sample := range []reflect.Value{reflect.New(reflect.TypeOf(v)), filled(reflect.TypeOf(v))} {
				m := sample.Interface().(protocol.Message)
				protocol.Stamp(m)
				mp, err := msgpack.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				asJSON, err := MsgpackToJSON(mp)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := doc.ValidateJSON(name, asJSON); err != nil {
					t.Errorf("msgpack %s read by the document: %v\n%s", name, err, asJSON)
				}
				js, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				if err := doc.ValidateJSON(name, js); err != nil {
					t.Errorf("JSON %s against the document: %v\n%s", name, err, js)
				}
			}
		}
		// The document finds the channel's messages from a concrete subject.
		subject := strings.NewReplacer("{session_id}", "s-1", "{agent}", "greeter", "{tool}", "sum", "{call_id}", "c1", "{step_key}", "s-1_s1").Replace(c.Address)
		if _, names := doc.Messages(subject); !contains(names, reflect.TypeOf(c.Message).Name()) {
			t.Errorf("subject %s: document lists %v", subject, names)
		}
	}
	// And a message that breaks the contract is caught: a wrong type, a missing required field.
	if doc.ValidateJSON("SubmitRequest", []byte(`{"v":1,"task":3}`)) == nil {
		t.Error("a number as task passed the document")
	}
	if doc.ValidateJSON("Event", []byte(`{"v":1,"type":"final","time":"2026-01-01T00:00:00Z"}`)) == nil {
		t.Error("an event without session_id passed the document")
	}
	if doc.ValidateJSON("SubmitRequest", []byte(`{"v":1,"task":"x","agnet":"y"}`)) == nil {
		t.Error("an unknown field passed the document")
	}
	// Identifiers are bounded as the doors bound them.
	if doc.ValidateJSON("SubmitRequest", []byte(`{"v":1,"task":"x","session_id":"`+strings.Repeat("a", protocol.MaxSessionID+1)+`"}`)) == nil {
		t.Error("a session id over its maxLength passed the document")
	}
	if doc.ValidateJSON("MemoryGetRequest", []byte(`{"v":1,"id":"a.b"}`)) == nil {
		t.Error("a memory entry id outside its pattern passed the document")
	}
}

// Every reply of a service carries the error part every caller reads the same way (Fault, or a
// tool's ToolResult with its code), and the documents publish its code as the table's enum.
func TestEveryReplyCarriesACode(t *testing.T) {
	n := 0
	for _, c := range Channels() {
		if c.Kind != Service {
			continue
		}
		n++
		rep := reflect.New(reflect.TypeOf(c.Reply)).Interface()
		r, ok := rep.(protocol.Reply)
		if !ok {
			t.Errorf("%s: %T has no Err: embed protocol.Fault", c.ID, c.Reply)
			continue
		}
		if f, ok := rep.(protocol.Failable); ok {
			f.Fail(protocol.Errorf(protocol.CodeNotFound, "nothing here"))
		} else if tr, ok := rep.(*protocol.ToolReply); ok {
			tr.Kind, tr.Error = protocol.ToolErrUnknown, "nothing here"
			tr.Coded()
		}
		if got := protocol.CodeOf(r.Err()); got != protocol.CodeNotFound {
			t.Errorf("%s: a %T failed with not_found reads back as %q", c.ID, c.Reply, got)
		}
		js, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Code protocol.Code `json:"code"`
		}
		if err := json.Unmarshal(js, &body); err != nil || body.Code != protocol.CodeNotFound {
			t.Errorf("%s: the JSON of a failed %T carries code %q (%v): %s", c.ID, c.Reply, body.Code, err, js)
		}
	}
	if n < 17 {
		t.Fatalf("%d service channels; the scan is broken", n)
	}
	doc, err := AsyncAPI()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Components.Schemas["Code"].Enum; len(got) != len(protocol.Codes()) {
		t.Errorf("the document's Code enum is %v, want every code of the table", got)
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// filled returns a *T with every field set: one element per slice, one entry per map, pointers
// to filled values, JSON objects in raw JSON fields.
func filled(t reflect.Type) reflect.Value {
	p := reflect.New(t)
	fill(p.Elem(), 0)
	return p
}

var rawJSONType = reflect.TypeOf(json.RawMessage(nil))
var timeType = reflect.TypeOf(time.Time{})

func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch {
	case v.Type() == rawJSONType:
		v.SetBytes([]byte(`{"a":[1,"x"]}`))
		return
	case v.Type() == reflect.TypeOf(protocol.Header{}):
		v.Set(reflect.ValueOf(protocol.Header{V: protocol.SchemaVersion})) // nested messages too
		return
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.UTC)))
		return
	case v.Type() == reflect.TypeFor[protocol.Code]():
		v.SetString(string(protocol.CodeNotFound)) // a code is one of the table's
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(2)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(2)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}

// codeTable is the table of error codes as docs/contract.md and docs/json.md show it, by status.
func codeTable() string {
	codes := protocol.Codes()
	sort.SliceStable(codes, func(i, j int) bool { return codes[i].HTTPStatus() < codes[j].HTTPStatus() })
	var b strings.Builder
	b.WriteString("| code | meaning | HTTP status and `Nats-Service-Error-Code` | CLI exit status | retry |\n|---|---|---|---|---|\n")
	for _, c := range codes {
		retry := "no"
		if c.Retryable() {
			retry = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %s |\n", c, strings.ReplaceAll(c.Doc(), "|", `\|`), c.HTTPStatus(), c.ExitStatus(), retry)
	}
	return b.String()
}

// The documents people read show the table the code has.
func TestDocsShowTheCodeTable(t *testing.T) {
	want := codeTable()
	for _, doc := range []string{"../../../docs/contract.md", "../../../docs/json.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not show the table of codes as pkg/protocol has it; put this in:\n%s", doc, want)
		}
	}
}
