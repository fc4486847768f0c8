package gateway

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/skein-mesh/skein/pkg/protocol"
)

// queryParam is an optional query parameter of the API. The gateway reads it and
// docs/openapi.json describes it from the same definition, so the document's constraints are the
// ones the gateway enforces. A parameter that is given must have a value: `?limit=` is refused
// like `?limit=x` (leave it out for the default), except a search text, where empty means none.
type queryParam interface {
	name() string
	schema() map[string]any
	doc() string
}

// given returns the parameter's value and whether the query has it.
func given(r *http.Request, name string) (string, bool) {
	vs, ok := r.URL.Query()[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// intParam is a whole number in [Min, Max]; absent, Default.
type intParam struct {
	Name, Doc         string
	Min, Max, Default int
}

func (p intParam) name() string { return p.Name }
func (p intParam) doc() string  { return p.Doc }
func (p intParam) schema() map[string]any {
	return map[string]any{"type": "integer", "minimum": p.Min, "maximum": p.Max, "default": p.Default}
}

func (p intParam) read(w http.ResponseWriter, r *http.Request) (int, bool) {
	v, ok := given(r, p.Name)
	if !ok {
		return p.Default, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < p.Min || n > p.Max {
		httpError(w, protocol.CodeBadRequest, fmt.Sprintf("query parameter %s must be a whole number %d..%d, got %q", p.Name, p.Min, p.Max, v))
		return 0, false
	}
	return n, true
}

// enumParam is one of Values; absent, "".
type enumParam struct {
	Name, Doc string
	Values    []string
}

func (p enumParam) name() string { return p.Name }
func (p enumParam) doc() string  { return p.Doc }
func (p enumParam) schema() map[string]any {
	return map[string]any{"type": "string", "enum": p.Values}
}

func (p enumParam) read(w http.ResponseWriter, r *http.Request) (string, bool) {
	v, ok := given(r, p.Name)
	if !ok {
		return "", true
	}
	for _, x := range p.Values {
		if v == x {
			return v, true
		}
	}
	httpError(w, protocol.CodeBadRequest, fmt.Sprintf("query parameter %s must be %s, got %q", p.Name, strings.Join(p.Values, ", "), v))
	return "", false
}

// idParam is an identifier of Kind; absent, "".
type idParam struct {
	Name string
	Kind protocol.ID
}

func (p idParam) name() string           { return p.Name }
func (p idParam) doc() string            { return p.Kind.Doc() }
func (p idParam) schema() map[string]any { return idSchema(p.Kind) }

// read answers a malformed (400) or too long (413) id itself: every id ends up in a subject or
// a key.
func (p idParam) read(w http.ResponseWriter, r *http.Request) (string, bool) {
	v, ok := given(r, p.Name)
	if !ok {
		return "", true
	}
	if err := p.Kind.Check(v); err != nil {
		httpRefuse(w, fmt.Errorf("query parameter %s: %w", p.Name, err))
		return "", false
	}
	return v, true
}

// textParam is a search text of at most protocol.MaxQueryBytes bytes; empty or absent, none.
// JSON Schema counts characters, not bytes: the document's maxLength is exact for ASCII, and a
// text of many-byte characters can be refused (413) under it.
type textParam struct{ Name, Doc string }

func (p textParam) name() string { return p.Name }
func (p textParam) doc() string  { return p.Doc }
func (p textParam) schema() map[string]any {
	return map[string]any{"type": "string", "maxLength": protocol.MaxQueryBytes}
}

func (p textParam) read(w http.ResponseWriter, r *http.Request) (string, bool) {
	v, _ := given(r, p.Name)
	if len(v) > protocol.MaxQueryBytes {
		httpRefuse(w, protocol.Errorf(protocol.CodeTooLarge, "query parameter %s is %d bytes long; at most %d", p.Name, len(v), protocol.MaxQueryBytes))
		return "", false
	}
	return v, true
}

// sinceParam is a window back from now, a Go duration in the grammar of durationPattern: up to
// four parts of up to five digits (so no value overflows), each with a unit. 0 is an empty window.
type sinceParam struct {
	Name, Doc string
	Default   time.Duration
}

// durationPattern is what sinceParam accepts, for the gateway (RE2) and the document (ECMA-262)
// alike: every string it matches time.ParseDuration reads.
const durationPattern = `^(0|([0-9]{1,5}(\.[0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,4})$`

var durationRE = regexp.MustCompile(durationPattern)

func (p sinceParam) name() string { return p.Name }
func (p sinceParam) doc() string  { return p.Doc }
func (p sinceParam) schema() map[string]any {
	return map[string]any{"type": "string", "pattern": durationPattern, "default": strings.TrimSuffix(p.Default.String(), "0m0s")}
}

func (p sinceParam) read(w http.ResponseWriter, r *http.Request) (time.Duration, bool) {
	v, ok := given(r, p.Name)
	if !ok {
		return p.Default, true
	}
	d, err := time.ParseDuration(v)
	if !durationRE.MatchString(v) || err != nil {
		httpError(w, protocol.CodeBadRequest, fmt.Sprintf("query parameter %s must be a duration such as 24h or 1h30m, got %q", p.Name, v))
		return 0, false
	}
	return d, true
}

// The API's query parameters.
var (
	qSince     = sinceParam{Name: "since", Doc: "how far back: a duration such as 24h or 1h30m (units h, m, s, ms, us, ns); 0 lists nothing", Default: defaultSince}
	qListLimit = intParam{Name: "limit", Doc: "at most this many", Min: 1, Max: maxListLimit, Default: defaultListLimit}
	qAgent     = idParam{Name: "agent", Kind: protocol.IDAgent}
	qText      = textParam{Name: "q", Doc: "a search text; empty: none"}
	qStatus    = textParam{Name: "status", Doc: "a session status or outcome (docs/json.md); a value no session has matches none; empty: any"}
	qTier      = enumParam{Name: "tier", Doc: "the memory tier; absent: both",
		Values: []string{string(protocol.TierStrategic), string(protocol.TierTactical)}}
	qKind = enumParam{Name: "kind", Doc: "the entries' kind (docs/memory.md); absent: guidelines in a list, every kind in a search",
		Values: []string{protocol.KindGuideline, protocol.KindCase, protocol.KindSkill, "all"}}
	qMemStatus = enumParam{Name: "status", Doc: "the entries' status; absent: active",
		Values: []string{string(protocol.MemoryActive), string(protocol.MemorySuperseded), string(protocol.MemoryRetired), string(protocol.MemoryQuarantined), "all"}}
	qOffset   = intParam{Name: "offset", Doc: "entries to skip", Min: 0, Max: math.MaxInt32, Default: 0}
	qMemLimit = intParam{Name: "limit", Doc: "at most this many entries", Min: 1, Max: defaultListLimit, Default: defaultListLimit}
	qTopK     = intParam{Name: "top_k", Doc: "how many nearest entries", Min: 1, Max: 100, Default: 10}
)
