// Package schema is the tool contract's input schema: a self-contained JSON Schema of an object,
// compiled once and checked against each call's arguments. It is a leaf (no skein import), so
// the configuration can check agent.input_schema without the tool runtime.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// Schema is a compiled input schema (a manifest's input_schema, an agent's agent.input_schema).
type Schema struct {
	s *jsonschema.Schema
}

// refusingLoader keeps a manifest's $ref from reading files or URLs: a schema must be
// self-contained, so loading a manifest never touches anything but the manifest.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %q is not allowed; input_schema must be self-contained", url)
}

const schemaURL = "mem:///input_schema.json"

// Compile compiles a self-contained JSON Schema with "type": "object": tool arguments are a
// JSON object, and a $ref may not read files or URLs.
func Compile(raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a JSON object, got %s", jsonKind(doc))
	}
	if t, ok := obj["type"]; !ok || t != "object" {
		return nil, errors.New(`must have "type": "object" (tool arguments are a JSON object)`)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("add schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		var sve *jsonschema.SchemaValidationError
		var ve *jsonschema.ValidationError
		if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
			var probs []string
			leaves(ve, &probs)
			return nil, fmt.Errorf("not a valid JSON Schema: %s", strings.Join(probs, "; "))
		}
		return nil, fmt.Errorf("not a valid JSON Schema: %s", strings.ReplaceAll(err.Error(), schemaURL, "input_schema"))
	}
	return &Schema{s: s}, nil
}

// ArgsError is an argument document that does not satisfy a tool's input_schema.
type ArgsError struct {
	Problems []string // each "at '/path': message", sorted
}

func (e *ArgsError) Error() string {
	return "arguments do not match input_schema: " + strings.Join(e.Problems, "; ")
}

// Validate checks args (a JSON object; empty means {}) against the schema.
func (sc *Schema) Validate(args json.RawMessage) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgsError{Problems: []string{"arguments are not valid JSON: " + err.Error()}}
	}
	err = sc.s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ArgsError{Problems: []string{err.Error()}}
	}
	var probs []string
	leaves(ve, &probs)
	sort.Strings(probs)
	return &ArgsError{Problems: probs}
}

// leaves collects the innermost causes, which say what is actually wrong and where, instead of
// the library's nested tree.
func leaves(e *jsonschema.ValidationError, out *[]string) {
	if len(e.Causes) == 0 {
		*out = append(*out, fmt.Sprintf("at '%s': %s", pointer(e.InstanceLocation), e.ErrorKind.LocalizedString(printer)))
		return
	}
	for _, c := range e.Causes {
		leaves(c, out)
	}
}

func pointer(tokens []string) string {
	var sb strings.Builder
	for _, tok := range tokens {
		sb.WriteByte('/')
		tok = strings.ReplaceAll(tok, "~", "~0")
		sb.WriteString(strings.ReplaceAll(tok, "/", "~1"))
	}
	return sb.String()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "number"
}
