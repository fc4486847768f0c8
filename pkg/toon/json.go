package toon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// ParseJSON reads one JSON value into the ordered data model: objects keep
// their key order (a repeated key keeps its first position and its last
// value, as JavaScript's JSON.parse does) and numbers keep their digits.
func ParseJSON(r io.Reader) (any, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	v, err := parseJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, fmt.Errorf("toon: json: unexpected content after the value at byte %d", dec.InputOffset())
		}
		return nil, fmt.Errorf("toon: json: %w", err)
	}
	return v, nil
}

const maxJSONDepth = 10000

func parseJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("toon: json: nesting deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("toon: json: unexpected end of input")
		}
		return nil, fmt.Errorf("toon: json: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := NewObject(0)
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("toon: json: %w", err)
				}
				key, _ := kt.(string)
				val, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj.Set(key, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("toon: json: %w", err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				val, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("toon: json: %w", err)
			}
			return arr, nil
		}
		return nil, fmt.Errorf("toon: json: unexpected %q", t)
	case json.Number:
		c, ok := Canonical(string(t))
		if !ok {
			return nil, fmt.Errorf("toon: json: invalid number %q", string(t))
		}
		return Number(c), nil
	default:
		return t, nil // string, bool, nil
	}
}

// normalize maps a Go value onto the data model (spec §3).
func normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string, *Object:
		return v, nil
	case Number:
		c, ok := Canonical(string(x))
		if !ok {
			return nil, fmt.Errorf("toon: invalid number %q", string(x))
		}
		return Number(c), nil
	case float64:
		return floatNumber(x), nil
	case float32:
		return floatNumber32(x), nil
	case int:
		return Number(strconv.FormatInt(int64(x), 10)), nil
	case int64:
		return Number(strconv.FormatInt(x, 10)), nil
	case int32:
		return Number(strconv.FormatInt(int64(x), 10)), nil
	case uint64:
		return Number(strconv.FormatUint(x, 10)), nil
	case uint:
		return Number(strconv.FormatUint(uint64(x), 10)), nil
	case []any:
		return x, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		obj := NewObject(len(keys))
		for _, k := range keys {
			obj.Set(k, x[k])
		}
		return obj, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("toon: normalize %T: %w", v, err)
	}
	return ParseJSON(bytes.NewReader(b))
}

func floatNumber(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	c, _ := Canonical(strconv.FormatFloat(f, 'e', -1, 64))
	return Number(c)
}

func floatNumber32(f float32) any {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return nil
	}
	c, _ := Canonical(strconv.FormatFloat(float64(f), 'e', -1, 32))
	return Number(c)
}

// appendJSON writes compact JSON for a value of the data model (and the Go
// types normalize accepts).
func appendJSON(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return appendJSONString(b, x), nil
	case Number:
		c, ok := Canonical(string(x))
		if !ok {
			return b, fmt.Errorf("toon: invalid number %q", string(x))
		}
		return append(b, c...), nil
	case *Object:
		b = append(b, '{')
		for i := range x.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, x.keys[i])
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, x.vals[i]); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, x[i]); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	}
	n, err := normalize(v)
	if err != nil {
		return b, err
	}
	return appendJSON(b, n)
}

const hexDigits = "0123456789abcdef"

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
