package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/vmihailenco/msgpack/v5"
)

// Document reads messages with nothing but a published document (docs/asyncapi.json or
// docs/openapi.json): what a client in another language does. Tests use it to check real
// traffic against the documents, without the Go types; the gateway checks request bodies with
// it. Safe for concurrent use.
type Document struct {
	raw      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex // guards compiler and schemas
	schemas  map[string]*jsonschema.Schema
}

const docURL = "urn:skein:contract"

// ReadDocument parses an AsyncAPI or OpenAPI document.
func ReadDocument(data []byte) (*Document, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("contract document: %w", err)
	}
	raw, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("contract document: not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, v); err != nil {
		return nil, fmt.Errorf("contract document: %w", err)
	}
	return &Document{raw: raw, compiler: c, schemas: map[string]*jsonschema.Schema{}}, nil
}

// Raw is the parsed document.
func (d *Document) Raw() map[string]any { return d.raw }

// Validate checks a JSON value (as jsonschema.UnmarshalJSON returns it) against the schema
// components.schemas[name].
func (d *Document) Validate(name string, v any) error {
	d.mu.Lock()
	s, ok := d.schemas[name]
	if !ok {
		var err error
		s, err = d.compiler.Compile(docURL + "#/components/schemas/" + name)
		if err != nil {
			d.mu.Unlock()
			return fmt.Errorf("schema %s: %w", name, err)
		}
		d.schemas[name] = s
	}
	d.mu.Unlock()
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// ValidateJSON checks JSON text against components.schemas[name].
func (d *Document) ValidateJSON(name string, data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", name, err)
	}
	return d.Validate(name, v)
}

// Messages returns the names of the messages an AsyncAPI document lists for the channel whose
// address matches subject ({parameter} matches one token), and the channel's id.
func (d *Document) Messages(subject string) (channel string, names []string) {
	chans, _ := d.raw["channels"].(map[string]any)
	for id, c := range chans {
		ch, _ := c.(map[string]any)
		addr, _ := ch["address"].(string)
		if !addressMatches(addr, subject) {
			continue
		}
		msgs, _ := ch["messages"].(map[string]any)
		for name := range msgs {
			names = append(names, name)
		}
		return id, names
	}
	return "", nil
}

func addressMatches(address, subject string) bool {
	a, s := strings.Split(address, "."), strings.Split(subject, ".")
	if len(a) != len(s) {
		return false
	}
	for i := range a {
		if strings.HasPrefix(a[i], "{") && strings.HasSuffix(a[i], "}") {
			continue
		}
		if a[i] != s[i] {
			return false
		}
	}
	return true
}

// MsgpackToJSON turns a msgpack message into its JSON form by the document's rules alone:
// timestamps become RFC 3339 strings and binary values, which always hold JSON text, become
// that JSON value.
func MsgpackToJSON(data []byte) ([]byte, error) {
	var v any
	if err := msgpack.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("msgpack: %w", err)
	}
	v, err := plain(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func plain(v any) (any, error) {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), nil
	case []byte:
		var j any
		if err := json.Unmarshal(x, &j); err != nil {
			return nil, fmt.Errorf("a binary value is not JSON text: %w", err)
		}
		return j, nil
	case map[string]any:
		for k, e := range x {
			p, err := plain(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			x[k] = p
		}
		return x, nil
	case []any:
		for i, e := range x {
			p, err := plain(e)
			if err != nil {
				return nil, err
			}
			x[i] = p
		}
		return x, nil
	}
	return v, nil
}
