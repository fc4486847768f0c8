package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/skein-mesh/skein/pkg/protocol"
	"github.com/skein-mesh/skein/pkg/protocol/contract"
)

// smallBodyBytes bounds the bodies that hold no task: a reason, a flag.
const smallBodyBytes = 4096

var (
	apiDocOnce sync.Once
	apiDoc     *contract.Document
	apiDocErr  error
)

// openAPIDocument is the served document, read as a client reads it.
func openAPIDocument() (*contract.Document, error) {
	apiDocOnce.Do(func() {
		raw, err := OpenAPI()
		if err != nil {
			apiDocErr = err
			return
		}
		apiDoc, apiDocErr = contract.ReadDocument(raw)
	})
	return apiDoc, apiDocErr
}

// decodeBody reads r's JSON body, at most limit bytes, into v, answering the request itself (and
// returning false) when it cannot. The body must match v's schema in docs/openapi.json, so the
// gateway takes exactly what the document says: no null where the schema has none, field names
// in their case, a task with text in it. An optional body may be left out (v stays as it is).
// A number JSON Schema counts as an integer (35303.0, 1e3) is read as one.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, optional bool, v any) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httpError(w, protocol.CodeTooLarge, fmt.Sprintf(
				"request body over %d bytes (a task may be at most %d bytes: put large inputs in a file a tool can read)", tooLarge.Limit, protocol.MaxTaskBytes))
			return false
		}
		httpError(w, protocol.CodeBadRequest, "request body: "+err.Error())
		return false
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		if optional {
			return true
		}
		httpError(w, protocol.CodeBadRequest, "the request body is empty; see docs/openapi.json for what this route takes")
		return false
	}
	doc, err := openAPIDocument()
	if err != nil {
		httpError(w, protocol.CodeInternal, err.Error())
		return false
	}
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		httpError(w, protocol.CodeBadRequest, "malformed request body: "+protocol.DescribeJSONError(err))
		return false
	}
	name := reflect.TypeOf(v).Elem().Name()
	if err := doc.Validate(name, parsed); err != nil {
		code, msg := schemaRefusal(err)
		httpError(w, code, "request body does not match "+name+" (docs/openapi.json): "+msg)
		return false
	}
	norm, err := json.Marshal(wholeNumbers(parsed))
	if err != nil {
		httpError(w, protocol.CodeInternal, err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(norm))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httpError(w, protocol.CodeBadRequest, "malformed request body: "+protocol.DescribeJSONError(err))
		return false
	}
	return true
}

// wholeNumbers writes every integral number of v (as jsonschema.UnmarshalJSON returns it) as an
// integer literal, which encoding/json reads into an int field.
func wholeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = wholeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = wholeNumbers(e)
		}
	case json.Number:
		// Screened with float64 first: only a number within int64's range is worth an exact look
		// (1e999999999 is not, and would cost the exact parse dearly).
		if f, err := strconv.ParseFloat(string(x), 64); err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt64 {
			return v
		}
		if f, _, err := big.ParseFloat(string(x), 10, 256, big.ToNearestEven); err == nil {
			if i, acc := f.Int64(); acc == big.Exact {
				return json.Number(strconv.FormatInt(i, 10))
			}
		}
	}
	return v
}

// schemaRefusal says, in a sentence, how a body misses its schema, with the code the gateway
// gives each kind of miss elsewhere: a string over its limit is too_large (413), as an id in the
// path is; a task with no text is rejected (422), as it is on NATS; anything else is bad_request.
func schemaRefusal(err error) (code protocol.Code, msg string) {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return protocol.CodeBadRequest, err.Error()
	}
	var leaves []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	var items []string
	long, empty := 0, 0
	for _, l := range leaves {
		at := "/" + strings.Join(l.InstanceLocation, "/")
		switch k := l.ErrorKind.(type) {
		case *kind.MaxLength:
			long++
			items = append(items, fmt.Sprintf("%s is %d characters long; at most %d (put large inputs in a file a tool can read)", at, k.Got, k.Want))
		case *kind.Pattern:
			if k.Want == protocol.TaskTextPattern {
				empty++
				items = append(items, at+" is empty: the task has no text")
				continue
			}
			items = append(items, l.Error())
		default:
			items = append(items, l.Error())
		}
	}
	msg = strings.Join(items, "; ")
	switch len(leaves) {
	case long:
		return protocol.CodeTooLarge, msg
	case empty:
		return protocol.CodeRejected, msg
	}
	return protocol.CodeBadRequest, msg
}
