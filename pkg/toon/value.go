package toon

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Number is a JSON number kept as decimal text, so that no digit is lost.
type Number = json.Number

// Object is a JSON object that keeps its keys in insertion order. Keys are
// unique: Set on an existing key replaces its value in place.
type Object struct {
	keys  []string
	vals  []any
	index map[string]int // built once the object outgrows a linear scan
}

const objectIndexThreshold = 12

// NewObject returns an empty object with room for n entries.
func NewObject(n int) *Object {
	if n < 0 {
		n = 0
	}
	return &Object{keys: make([]string, 0, n), vals: make([]any, 0, n)}
}

// Len is the number of entries.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// Keys returns the keys in order. The slice must not be modified.
func (o *Object) Keys() []string { return o.keys }

// At returns the i-th entry.
func (o *Object) At(i int) (string, any) { return o.keys[i], o.vals[i] }

func (o *Object) find(key string) int {
	if o.index != nil {
		if i, ok := o.index[key]; ok {
			return i
		}
		return -1
	}
	for i, k := range o.keys {
		if k == key {
			return i
		}
	}
	return -1
}

// Get returns the value stored under key.
func (o *Object) Get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	if i := o.find(key); i >= 0 {
		return o.vals[i], true
	}
	return nil, false
}

// Has reports whether key is present.
func (o *Object) Has(key string) bool { return o != nil && o.find(key) >= 0 }

// Set stores value under key, appending a new key at the end or replacing
// the value of an existing key where it stands.
func (o *Object) Set(key string, value any) {
	if i := o.find(key); i >= 0 {
		o.vals[i] = value
		return
	}
	o.keys = append(o.keys, key)
	o.vals = append(o.vals, value)
	if o.index != nil {
		o.index[key] = len(o.keys) - 1
	} else if len(o.keys) > objectIndexThreshold {
		o.index = make(map[string]int, len(o.keys)*2)
		for i, k := range o.keys {
			o.index[k] = i
		}
	}
}

// MarshalJSON writes the object with its key order preserved.
func (o *Object) MarshalJSON() ([]byte, error) { return appendJSON(nil, o) }

// Canonical renders a JSON number token in the canonical form of spec §2:
// plain decimal when 1e-6 <= |n| < 1e21 (no exponent, no leading or
// trailing zeros, -0 as 0), otherwise d.ddde±x. It works on the decimal
// digits, so no precision is lost. ok is false if s is not a JSON-grammar
// number (the TOON decoder grammar is the same, with E allowed).
func Canonical(s string) (out string, ok bool) {
	if alreadyCanonical(s) {
		return s, true
	}
	i := 0
	neg := false
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[intStart:i]
	if intPart == "" {
		return "", false
	}
	var frac string
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		frac = s[fs:i]
		if frac == "" {
			return "", false
		}
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		es := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if es == i {
			return "", false
		}
		if i-es > 15 {
			// An exponent this large cannot be normalized without big
			// arithmetic; the token is valid JSON as it stands.
			if i != len(s) {
				return "", false
			}
			return s, true
		}
		exp, _ = strconv.ParseInt(s[es:i], 10, 64)
		if eneg {
			exp = -exp
		}
	}
	if i != len(s) {
		return "", false
	}
	digits := intPart + frac
	e := exp - int64(len(frac))
	// Strip leading and trailing zeros: value = D × 10^e.
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	digits = digits[lead:]
	if digits == "" {
		return "0", true
	}
	trail := len(digits)
	for trail > 0 && digits[trail-1] == '0' {
		trail--
	}
	e += int64(len(digits) - trail)
	digits = digits[:trail]
	n := int64(len(digits))
	p := n - 1 + e // decimal exponent of the leading digit
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if p >= -6 && p <= 20 {
		switch {
		case e >= 0:
			b.WriteString(digits)
			for k := int64(0); k < e; k++ {
				b.WriteByte('0')
			}
		case n+e > 0:
			b.WriteString(digits[:n+e])
			b.WriteByte('.')
			b.WriteString(digits[n+e:])
		default:
			b.WriteString("0.")
			for k := int64(0); k < -(n + e); k++ {
				b.WriteByte('0')
			}
			b.WriteString(digits)
		}
		return b.String(), true
	}
	b.WriteByte(digits[0])
	if n > 1 {
		b.WriteByte('.')
		b.WriteString(digits[1:])
	}
	b.WriteByte('e')
	if p >= 0 {
		b.WriteByte('+')
	} else {
		b.WriteByte('-')
		p = -p
	}
	b.WriteString(strconv.FormatInt(p, 10))
	return b.String(), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// alreadyCanonical recognizes the common canonical shapes without
// allocating: -?(0|[1-9]\d*)(\.\d*[1-9])? inside the plain-decimal range.
func alreadyCanonical(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intLen := i - start
	if intLen == 0 || intLen > 21 || (intLen > 1 && s[start] == '0') {
		return false
	}
	if i == len(s) {
		return s != "-0"
	}
	if s[i] != '.' || s[len(s)-1] == '0' {
		return false
	}
	fs := i + 1
	for i = fs; i < len(s) && isDigit(s[i]); i++ {
	}
	if i != len(s) || i == fs {
		return false
	}
	if intLen == 1 && s[start] == '0' {
		// 0.000000x is below 1e-6 and takes exponent form.
		z := fs
		for z < len(s) && s[z] == '0' {
			z++
		}
		return z < len(s) && z-fs < 6
	}
	return true
}

// Equal reports JSON-model equality (spec §2): ordered object keys,
// numbers by mathematical value.
func Equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case Number:
		y, ok := b.(Number)
		if !ok {
			return false
		}
		cx, _ := Canonical(string(x))
		cy, _ := Canonical(string(y))
		return cx == cy
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case *Object:
		y, ok := b.(*Object)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i := range x.keys {
			if x.keys[i] != y.keys[i] || !Equal(x.vals[i], y.vals[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// ToAny converts a decoded value into plain Go values as encoding/json
// would produce them with UseNumber: map[string]any (key order is lost),
// []any, json.Number, string, bool, nil.
func ToAny(v any) any {
	switch x := v.(type) {
	case *Object:
		m := make(map[string]any, x.Len())
		for i, k := range x.keys {
			m[k] = ToAny(x.vals[i])
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = ToAny(x[i])
		}
		return out
	}
	return v
}

// Unmarshal decodes TOON into v the way json.Unmarshal decodes JSON into v
// (structs, maps, slices, any).
func Unmarshal(data []byte, v any, opts DecodeOptions) error {
	val, err := DecodeBytes(data, opts)
	if err != nil {
		return err
	}
	js, err := appendJSON(nil, val)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, v); err != nil {
		return fmt.Errorf("toon: unmarshal: %w", err)
	}
	return nil
}
