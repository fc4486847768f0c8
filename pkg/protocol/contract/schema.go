// Package contract publishes skein's wire contract as documents any language can read: JSON
// Schemas of the message types, reflected from pkg/protocol so they cannot drift from the code,
// and the AsyncAPI document of the NATS subjects (docs/asyncapi.json). The gateway builds the
// OpenAPI document of its HTTP API from the same schemas.
package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// SchemaRef is where a document keeps its schemas: both AsyncAPI 3 and OpenAPI 3.1 use
// components.schemas, so one set of schemas serves both.
const SchemaRef = "#/components/schemas/"

// Schemas returns a JSON Schema per named type reachable from values, keyed by the Go type's
// name, with references between them as SchemaRef+name. The schemas describe the JSON form of
// the types (their json tags); a field is required when Go always writes it (no omitempty),
// and may be null when Go writes a nil slice, map or pointer as null.
func Schemas(values ...any) (map[string]json.RawMessage, error) {
	types := map[string]reflect.Type{}
	codeType := reflect.TypeFor[protocol.Code]()
	r := &jsonschema.Reflector{
		Anonymous:                 true,
		AllowAdditionalProperties: false,
		// Every error code refers to one schema, the table's.
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == codeType {
				return &jsonschema.Schema{Ref: "#/$defs/" + codeType.Name()}
			}
			return nil
		},
		Namer: func(t reflect.Type) string {
			if t.Name() == "" {
				return ""
			}
			if prev, ok := types[t.Name()]; ok && prev != t {
				panic(fmt.Sprintf("contract: two types named %s (%s and %s)", t.Name(), prev, t))
			}
			types[t.Name()] = t
			return t.Name()
		},
	}
	defs := jsonschema.Definitions{codeType.Name(): CodeSchema()}
	for _, v := range values {
		t := reflect.TypeOf(v)
		s := r.ReflectFromType(t)
		for name, d := range s.Definitions {
			defs[name] = d
		}
	}
	out := map[string]json.RawMessage{}
	for name, d := range defs {
		if t, ok := types[name]; ok {
			identifiers(t, d)
			taskTexts(t, d)
			nullable(t, d)
		}
		if d.Properties != nil { // an object (the code enum is not)
			if v, ok := d.Properties.Get("v"); ok && v != nil {
				v.Const = protocol.SchemaVersion // the schema version: a reader refuses any other
			}
		}
		b, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		out[name] = bytes.ReplaceAll(b, []byte(`"#/$defs/`), []byte(`"`+SchemaRef))
	}
	return out, nil
}

// CodeSchema is the JSON Schema of an error code: the enum of protocol's table, and in the
// x-skein extension each code's HTTP status, CLI exit status, whether to retry and meaning.
func CodeSchema() *jsonschema.Schema {
	codes := protocol.Codes()
	enum := make([]any, len(codes))
	table := map[string]any{}
	for i, c := range codes {
		enum[i] = string(c)
		table[string(c)] = map[string]any{"http": c.HTTPStatus(), "exit": c.ExitStatus(), "retryable": c.Retryable(), "doc": c.Doc()}
	}
	return &jsonschema.Schema{Type: "string", Enum: enum,
		Description: "What kind of failure an error is: the reply's code, its Nats-Service-Error-Code (the code's HTTP status) and the HTTP API's status all come from it. Decide on the code, never on the error's text.",
		Extras:      map[string]any{"x-skein": table}}
}

// identifiers bounds the properties that hold identifiers (fields tagged `id:"<kind>"`, see
// protocol.ID): their pattern and maxLength are the kind's, as every door checks them.
func identifiers(t reflect.Type, s *jsonschema.Schema) {
	if t.Kind() != reflect.Struct || s.Properties == nil {
		return
	}
	for _, f := range reflect.VisibleFields(t) {
		kind, ok := protocol.IDOfKind(f.Tag.Get("id"))
		if !ok || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		p, ok := s.Properties.Get(name)
		if !ok || p == nil {
			continue
		}
		if p.Type == "array" && p.Items != nil {
			p = p.Items
		}
		if p.Type != "string" {
			panic(fmt.Sprintf("contract: %s.%s is tagged id:%q but is no string or list of strings", t, f.Name, kind.Kind))
		}
		// An absent id is written as "" where Go has no omitempty (a refusal's session_id).
		limit := uint64(kind.Max)
		p.MaxLength, p.Pattern = &limit, "^("+strings.TrimSuffix(strings.TrimPrefix(kind.Pattern(), "^"), "$")+")?$"
	}
}

// taskTexts bounds the properties that hold a task's text (fields tagged `text:"task"`): a
// character that is not white space, at most protocol.MaxTaskBytes (JSON Schema counts
// characters: exact for ASCII, a text of many-byte characters can be refused under it).
func taskTexts(t reflect.Type, s *jsonschema.Schema) {
	if t.Kind() != reflect.Struct || s.Properties == nil {
		return
	}
	for _, f := range reflect.VisibleFields(t) {
		if f.Tag.Get("text") != "task" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		p, ok := s.Properties.Get(name)
		if !ok || p == nil || p.Type != "string" {
			panic(fmt.Sprintf("contract: %s.%s is tagged text:task but is no string property", t, f.Name))
		}
		maxLen := uint64(protocol.MaxTaskBytes) // the pattern asks for one character at least
		p.MaxLength, p.Pattern = &maxLen, protocol.TaskTextPattern
	}
}

// nullable lets the properties Go may write as null be null: encoding/json writes a nil slice,
// map or pointer without omitempty as null.
func nullable(t reflect.Type, s *jsonschema.Schema) {
	if t.Kind() != reflect.Struct || s.Properties == nil {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			nullable(ft, s) // embedded: its fields are inlined
			continue
		}
		if name == "-" || !f.IsExported() || strings.Contains(","+opts+",", ",omitempty,") {
			continue
		}
		if name == "" {
			name = f.Name
		}
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer:
		default:
			continue
		}
		p, ok := s.Properties.Get(name)
		if !ok || p == nil || (p.Type == "" && p.Ref == "" && p.AnyOf == nil && p.OneOf == nil) {
			continue // absent, or any JSON value already (json.RawMessage)
		}
		s.Properties.Set(name, &jsonschema.Schema{AnyOf: []*jsonschema.Schema{p, {Type: "null"}}})
	}
}
