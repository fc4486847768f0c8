package toon

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// Encode renders v as a TOON document (spec §5–§12). The output has LF
// line endings and no trailing newline.
func Encode(v any, opts EncodeOptions) (out []byte, err error) {
	o, err := opts.norm()
	if err != nil {
		return nil, err
	}
	val, err := deepNormalize(v, 0)
	if err != nil {
		return nil, err
	}
	e := &encoder{opts: o, delim: byte(o.Delimiter)}
	defer func() {
		// The encoder unwinds with tooLarge from as deep as it got (see startLine).
		if r := recover(); r != nil {
			if _, ok := r.(tooLarge); !ok {
				panic(r)
			}
			out, err = nil, ErrTooLarge
		}
	}()
	e.root(val)
	if o.MaxBytes > 0 && len(e.buf) > o.MaxBytes {
		return nil, ErrTooLarge
	}
	return e.buf, nil
}

// tooLarge is the panic value that unwinds an encoder past MaxBytes.
type tooLarge struct{}

// EncodeTo is Encode writing to w.
func EncodeTo(w io.Writer, v any, opts EncodeOptions) error {
	b, err := Encode(v, opts)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Marshal is Encode with default options.
func Marshal(v any) ([]byte, error) { return Encode(v, EncodeOptions{}) }

const maxEncodeDepth = 10000

// deepNormalize maps every value of the tree onto the data model, copying a
// container only when one of its children changed.
func deepNormalize(v any, depth int) (any, error) {
	if depth > maxEncodeDepth {
		return nil, fmt.Errorf("toon: encode: nesting deeper than %d", maxEncodeDepth)
	}
	n, err := normalize(v)
	if err != nil {
		return nil, err
	}
	switch x := n.(type) {
	case string:
		if !utf8.ValidString(x) {
			return string(bytes.ToValidUTF8([]byte(x), []byte("\ufffd"))), nil
		}
		return x, nil
	case []any:
		var out []any
		for i, el := range x {
			ne, err := deepNormalize(el, depth+1)
			if err != nil {
				return nil, err
			}
			if out == nil && !sameValue(ne, el) {
				out = make([]any, len(x))
				copy(out, x[:i])
			}
			if out != nil {
				out[i] = ne
			}
		}
		if out != nil {
			return out, nil
		}
		return x, nil
	case *Object:
		var out *Object
		for i := range x.keys {
			ne, err := deepNormalize(x.vals[i], depth+1)
			if err != nil {
				return nil, err
			}
			key := x.keys[i]
			if !utf8.ValidString(key) {
				key = string(bytes.ToValidUTF8([]byte(key), []byte("\ufffd")))
			}
			if out == nil && (!sameValue(ne, x.vals[i]) || key != x.keys[i]) {
				out = NewObject(len(x.keys))
				for j := 0; j < i; j++ {
					out.Set(x.keys[j], x.vals[j])
				}
			}
			if out != nil {
				out.Set(key, ne)
			}
		}
		if out != nil {
			return out, nil
		}
		return x, nil
	}
	return n, nil
}

// sameValue is an identity check cheap enough for the normalize fast path:
// containers compare by pointer, primitives by value.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	case *Object:
		y, ok := b.(*Object)
		return ok && x == y
	case Number:
		y, ok := b.(Number)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

type encoder struct {
	opts  EncodeOptions
	delim byte
	buf   []byte
	lines int
}

// field is one entry of a tabular header; children is set for a nested
// field group (spec §9.3).
type field struct {
	name     string
	children []field
}

func isPrimitive(v any) bool {
	switch v.(type) {
	case nil, bool, string, Number:
		return true
	}
	return false
}

// startLine is where a document grows by more than its values, so it is where MaxBytes is
// checked: every line starts here, and a value's own text is bounded by the input.
func (e *encoder) startLine(depth int) {
	if e.opts.MaxBytes > 0 && len(e.buf)+1+depth*e.opts.IndentSize > e.opts.MaxBytes {
		panic(tooLarge{})
	}
	if e.lines > 0 {
		e.buf = append(e.buf, '\n')
	}
	e.lines++
	for i := 0; i < depth*e.opts.IndentSize; i++ {
		e.buf = append(e.buf, ' ')
	}
}

func (e *encoder) startItem(depth int) {
	e.startLine(depth)
	e.buf = append(e.buf, '-', ' ')
}

func (e *encoder) root(v any) {
	switch x := v.(type) {
	case []any:
		e.array(nil, x, 0)
	case *Object:
		if fields := keyedFields(x); fields != nil {
			e.keyedObject(nil, x, fields, 0)
			return
		}
		e.objectFields(x, 0)
	default:
		// A leading BOM would be stripped by decoders; quoting keeps it.
		if s, ok := v.(string); ok && len(s) >= 3 && s[:3] == "\ufeff" {
			e.startLine(0)
			e.buf = appendQuoted(e.buf, s)
			return
		}
		e.startLine(0)
		e.buf = e.appendPrimitive(e.buf, v, e.delim)
	}
}

func (e *encoder) objectFields(o *Object, depth int) {
	for i := range o.keys {
		e.keyValue(o.keys[i], o.vals[i], depth)
	}
}

func (e *encoder) keyValue(key string, v any, depth int) {
	switch x := v.(type) {
	case []any:
		e.array(&key, x, depth)
	case *Object:
		if fields := keyedFields(x); fields != nil {
			e.keyedObject(&key, x, fields, depth)
			return
		}
		e.startLine(depth)
		e.buf = appendKey(e.buf, key)
		e.buf = append(e.buf, ':')
		e.objectFields(x, depth+1)
	default:
		e.startLine(depth)
		e.buf = appendKey(e.buf, key)
		e.buf = append(e.buf, ':', ' ')
		e.buf = e.appendPrimitive(e.buf, v, e.delim)
	}
}

func (e *encoder) keyedObject(key *string, o *Object, fields []field, depth int) {
	e.startLine(depth)
	e.header(key, len(o.keys), true, fields)
	e.entryRows(o, fields, depth+1)
}

func (e *encoder) entryRows(o *Object, fields []field, depth int) {
	for i := range o.keys {
		e.startLine(depth)
		e.buf = appendKey(e.buf, o.keys[i])
		e.buf = append(e.buf, ':', ' ')
		e.cells(o.vals[i].(*Object), fields, true)
	}
}

// cells writes one row's leaf values in depth-first field order.
func (e *encoder) cells(row *Object, fields []field, first bool) bool {
	for _, f := range fields {
		v, _ := row.Get(f.name)
		if f.children != nil {
			first = e.cells(v.(*Object), f.children, first)
			continue
		}
		if !first {
			e.buf = append(e.buf, e.delim)
		}
		first = false
		e.buf = e.appendPrimitive(e.buf, v, e.delim)
	}
	return first
}

func (e *encoder) header(key *string, n int, keyed bool, fields []field) {
	if key != nil {
		e.buf = appendKey(e.buf, *key)
	}
	e.buf = append(e.buf, '[')
	e.buf = strconv.AppendInt(e.buf, int64(n), 10)
	if keyed {
		e.buf = append(e.buf, ':')
	}
	if e.delim != ',' {
		e.buf = append(e.buf, e.delim)
	}
	e.buf = append(e.buf, ']')
	if fields != nil {
		e.fieldList(fields)
	}
	e.buf = append(e.buf, ':')
}

func (e *encoder) fieldList(fields []field) {
	e.buf = append(e.buf, '{')
	for i, f := range fields {
		if i > 0 {
			e.buf = append(e.buf, e.delim)
		}
		e.buf = appendKey(e.buf, f.name)
		if f.children != nil {
			e.fieldList(f.children)
		}
	}
	e.buf = append(e.buf, '}')
}

func allPrimitive(a []any) bool {
	for _, v := range a {
		if !isPrimitive(v) {
			return false
		}
	}
	return true
}

func (e *encoder) inlineArray(key *string, a []any) {
	e.header(key, len(a), false, nil)
	for i, v := range a {
		if i == 0 {
			e.buf = append(e.buf, ' ')
		} else {
			e.buf = append(e.buf, e.delim)
		}
		e.buf = e.appendPrimitive(e.buf, v, e.delim)
	}
}

// array encodes an array in object-field (key != nil) or root position.
func (e *encoder) array(key *string, a []any, depth int) {
	if len(a) == 0 {
		e.startLine(depth)
		if key != nil {
			e.buf = appendKey(e.buf, *key)
			e.buf = append(e.buf, ':', ' ', '[', ']')
		} else {
			e.buf = append(e.buf, '[', ']')
		}
		return
	}
	if allPrimitive(a) {
		e.startLine(depth)
		e.inlineArray(key, a)
		return
	}
	if fields := tabularFields(a); fields != nil {
		e.startLine(depth)
		e.header(key, len(a), false, fields)
		for _, row := range a {
			e.startLine(depth + 1)
			e.cells(row.(*Object), fields, true)
		}
		return
	}
	e.startLine(depth)
	e.header(key, len(a), false, nil)
	for _, v := range a {
		e.listItem(v, depth+1)
	}
}

func (e *encoder) listItem(v any, depth int) {
	switch x := v.(type) {
	case []any:
		e.startItem(depth)
		if allPrimitive(x) {
			e.inlineArray(nil, x)
			return
		}
		e.header(nil, len(x), false, nil)
		for _, el := range x {
			e.listItem(el, depth+1)
		}
	case *Object:
		e.objectItem(x, depth)
	default:
		e.startItem(depth)
		e.buf = e.appendPrimitive(e.buf, v, e.delim)
	}
}

// objectItem encodes an object as a list item (spec §10): the first field
// rides on the hyphen line, the others follow at depth+1.
func (e *encoder) objectItem(o *Object, depth int) {
	if o.Len() == 0 {
		e.startLine(depth)
		e.buf = append(e.buf, '-')
		return
	}
	key, first := o.keys[0], o.vals[0]
	switch x := first.(type) {
	case []any:
		if fields := tabularFields(x); fields != nil {
			e.startItem(depth)
			e.header(&key, len(x), false, fields)
			for _, row := range x {
				e.startLine(depth + 2)
				e.cells(row.(*Object), fields, true)
			}
			break
		}
		e.startItem(depth)
		switch {
		case len(x) == 0:
			e.buf = appendKey(e.buf, key)
			e.buf = append(e.buf, ':', ' ', '[', ']')
		case allPrimitive(x):
			e.inlineArray(&key, x)
		default:
			e.header(&key, len(x), false, nil)
			for _, el := range x {
				e.listItem(el, depth+2)
			}
		}
	case *Object:
		if fields := keyedFields(x); fields != nil {
			e.startItem(depth)
			e.header(&key, len(x.keys), true, fields)
			e.entryRows(x, fields, depth+2)
			break
		}
		e.startItem(depth)
		e.buf = appendKey(e.buf, key)
		e.buf = append(e.buf, ':')
		e.objectFields(x, depth+2)
	default:
		e.startItem(depth)
		e.buf = appendKey(e.buf, key)
		e.buf = append(e.buf, ':', ' ')
		e.buf = e.appendPrimitive(e.buf, first, e.delim)
	}
	for i := 1; i < len(o.keys); i++ {
		e.keyValue(o.keys[i], o.vals[i], depth+1)
	}
}

// tabularFields returns the header fields when every element of rows is a
// non-empty object with the same key set and every column is
// uniform-primitive or nested-uniform (spec §9.3), else nil.
func tabularFields(rows []any) []field {
	if len(rows) == 0 {
		return nil
	}
	objs := make([]*Object, len(rows))
	for i, r := range rows {
		o, ok := r.(*Object)
		if !ok {
			return nil
		}
		objs[i] = o
	}
	return objectFields(objs)
}

func objectFields(objs []*Object) []field {
	first := objs[0]
	if first.Len() == 0 {
		return nil
	}
	for _, o := range objs[1:] {
		if o.Len() != first.Len() {
			return nil
		}
		for _, k := range first.keys {
			if !o.Has(k) {
				return nil
			}
		}
	}
	fields := make([]field, 0, first.Len())
	col := make([]any, len(objs))
	for ki, k := range first.keys {
		for i, o := range objs {
			if i == 0 {
				col[i] = first.vals[ki]
			} else {
				col[i], _ = o.Get(k)
			}
		}
		f, ok := classifyColumn(k, col)
		if !ok {
			return nil
		}
		fields = append(fields, f)
	}
	return fields
}

func classifyColumn(name string, col []any) (field, bool) {
	if allPrimitive(col) {
		return field{name: name}, true
	}
	subs := make([]*Object, len(col))
	for i, v := range col {
		o, ok := v.(*Object)
		if !ok || o.Len() == 0 {
			return field{}, false
		}
		subs[i] = o
	}
	children := objectFields(subs)
	if children == nil {
		return field{}, false
	}
	return field{name: name, children: children}, true
}

// keyedFields returns the keyed-tabular header fields for an object of at
// least two entries whose values are uniform non-empty objects (spec §9.5).
func keyedFields(o *Object) []field {
	if o.Len() < 2 {
		return nil
	}
	objs := make([]*Object, len(o.vals))
	for i, v := range o.vals {
		x, ok := v.(*Object)
		if !ok || x.Len() == 0 {
			return nil
		}
		objs[i] = x
	}
	return objectFields(objs)
}

func (e *encoder) appendPrimitive(b []byte, v any, delim byte) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		if x {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case Number:
		return append(b, x...)
	case string:
		if safeUnquoted(x, delim) {
			return append(b, x...)
		}
		return appendQuoted(b, x)
	}
	panic(fmt.Sprintf("toon: unexpected %T at a primitive position", v))
}

// safeUnquoted implements the quoting rules of spec §7.2.
func safeUnquoted(s string, delim byte) bool {
	if s == "" {
		return false
	}
	if c := s[0]; c == ' ' || c == '\t' || c == '-' || c == '#' {
		return false
	}
	if c := s[len(s)-1]; c == ' ' || c == '\t' {
		return false
	}
	if s == "true" || s == "false" || s == "null" || numericLike(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ':', '"', '\\', '[', ']', '{', '}':
			return false
		default:
			if c < 0x20 || c == delim {
				return false
			}
		}
	}
	return true
}

// numericLike matches /^[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?$/i.
func numericLike(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	return isDecimalTail(s, i)
}

// isDecimalTail matches \d+(?:\.\d+)?(?:e[+-]?\d+)?$ from position i.
func isDecimalTail(s string, i int) bool {
	st := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == st {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == fs {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		es := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == es {
			return false
		}
	}
	return i == len(s)
}

// validUnquotedKey matches ^[A-Za-z_][A-Za-z0-9_.]*$ (spec §7.3).
func validUnquotedKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		case i > 0 && (isDigit(c) || c == '.'):
		default:
			return false
		}
	}
	return true
}

func appendKey(b []byte, k string) []byte {
	if validUnquotedKey(k) {
		return append(b, k...)
	}
	return appendQuoted(b, k)
}

// appendQuoted writes a quoted string with the escapes of spec §7.1.
func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
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
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
