package toon

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeString decodes a TOON document (spec §4–§14).
func DecodeString(s string, opts DecodeOptions) (any, error) {
	o, err := opts.norm()
	if err != nil {
		return nil, err
	}
	d := &decoder{
		strict:     !o.NonStrict,
		indentSize: o.IndentSize,
		maxDepth:   o.MaxDepth,
		maxLength:  o.MaxLength,
	}
	if err := d.scan(s); err != nil {
		return nil, err
	}
	return d.document()
}

// DecodeBytes decodes a TOON document held in memory.
func DecodeBytes(b []byte, opts DecodeOptions) (any, error) {
	return DecodeString(string(b), opts)
}

// Decode reads a whole TOON document from r.
func Decode(r io.Reader, opts DecodeOptions) (any, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("toon: read: %w", err)
	}
	return DecodeBytes(b, opts)
}

type line struct {
	num     int    // 1-based line number
	raw     string // the line without its terminator
	indent  int    // bytes of indentation before content
	depth   int
	content string // raw after indentation, trailing spaces trimmed
}

type decoder struct {
	lines      []line
	blanks     []int // line numbers of blank lines, ascending
	pos        int
	last       *line // last consumed line
	strict     bool
	indentSize int
	maxDepth   int
	maxLength  int
	nest       int
}

// column converts a byte offset within l.content to a 1-based code point
// column of the raw line.
func (l *line) column(off int) int {
	end := l.indent + off
	if end > len(l.raw) {
		end = len(l.raw)
	}
	if end < 0 {
		end = 0
	}
	return utf8.RuneCountInString(l.raw[:end]) + 1
}

func (d *decoder) errAt(l *line, off int, kind ErrorKind, format string, args ...any) error {
	return &SyntaxError{Kind: kind, Line: l.num, Column: l.column(off), Msg: fmt.Sprintf(format, args...)}
}

// scan splits the input into lines, drops comment lines (spec §5.1),
// records blank lines and checks indentation (spec §12).
func (d *decoder) scan(s string) error {
	// Rough pre-size: most documents have short lines.
	d.lines = make([]line, 0, strings.Count(s, "\n")+1)
	num := 0
	for start := 0; start <= len(s); {
		end := strings.IndexByte(s[start:], '\n')
		var raw string
		if end < 0 {
			raw = s[start:]
			start = len(s) + 1
		} else {
			raw = s[start : start+end]
			start += end + 1
		}
		num++
		if num == 1 && strings.HasPrefix(raw, "\ufeff") {
			raw = raw[3:]
		}
		if n := len(raw); n > 0 && raw[n-1] == '\r' {
			raw = raw[:n-1]
		}
		if !d.strict && !utf8.ValidString(raw) {
			// Non-strict decoding substitutes U+FFFD, so decoded strings
			// are always valid UTF-8.
			raw = strings.ToValidUTF8(raw, "\ufffd")
		}
		if d.strict && !utf8.ValidString(raw) {
			i := 0
			for i < len(raw) {
				r, size := utf8.DecodeRuneInString(raw[i:])
				if r == utf8.RuneError && size == 1 {
					break
				}
				i += size
			}
			return &SyntaxError{Kind: ErrUTF8, Line: num, Column: utf8.RuneCountInString(raw[:i]) + 1, Msg: "ill-formed UTF-8 sequence"}
		}
		ws := 0
		firstTab, tabs := -1, 0
		for ws < len(raw) && (raw[ws] == ' ' || raw[ws] == '\t') {
			if raw[ws] == '\t' {
				if firstTab < 0 {
					firstTab = ws
				}
				tabs++
			}
			ws++
		}
		indent := ws
		if d.strict && firstTab >= 0 {
			indent = firstTab
			tabs = 0
		}
		content := strings.TrimRight(raw[indent:], " ")
		if firstTab < 0 && len(content) > 0 && content[0] == '#' {
			continue
		}
		depth := (indent-tabs)/d.indentSize + tabs
		if content == "" {
			d.blanks = append(d.blanks, num)
			continue
		}
		if d.strict {
			if firstTab >= 0 {
				return &SyntaxError{Kind: ErrIndent, Line: num, Column: utf8.RuneCountInString(raw[:firstTab]) + 1, Msg: "tab in indentation"}
			}
			if indent%d.indentSize != 0 {
				return &SyntaxError{Kind: ErrIndent, Line: num, Column: indent + 1, Msg: fmt.Sprintf("indentation of %d spaces is not a multiple of %d", indent, d.indentSize)}
			}
		}
		d.lines = append(d.lines, line{num: num, raw: raw, indent: indent, depth: depth, content: content})
	}
	return nil
}

func (d *decoder) peek() *line {
	if d.pos < len(d.lines) {
		return &d.lines[d.pos]
	}
	return nil
}

func (d *decoder) next() *line {
	l := &d.lines[d.pos]
	d.pos++
	d.last = l
	return l
}

func (d *decoder) enter(l *line) error {
	d.nest++
	if d.nest > d.maxDepth {
		return d.errAt(l, 0, ErrLimit, "nesting deeper than %d levels", d.maxDepth)
	}
	return nil
}

func (d *decoder) leave() { d.nest-- }

func (d *decoder) document() (any, error) {
	first := d.peek()
	if first == nil {
		return NewObject(0), nil
	}
	if first.depth != 0 {
		return nil, d.errAt(first, 0, ErrOverIndent, "first line must not be indented (depth %d)", first.depth)
	}
	if trimSpaces(first.content) == "[]" {
		d.next()
		if err := d.fullyConsumed(); err != nil {
			return nil, err
		}
		return []any{}, nil
	}
	if isArrayHeaderContent(first.content) {
		h, ok, err := d.parseHeader(first, first.content, 0)
		if err != nil {
			return nil, err
		}
		if ok {
			d.next()
			v, err := d.arrayFromHeader(h, first, 0)
			if err != nil {
				return nil, err
			}
			if err := d.fullyConsumed(); err != nil {
				return nil, err
			}
			return v, nil
		}
	}
	d.next()
	following := d.peek()
	isKV := findUnquoted(first.content, ':', 0) >= 0
	if !isKV {
		if following == nil {
			return d.primitive(first, first.content, 0)
		}
		if following.depth == 0 {
			return nil, d.errAt(following, 0, ErrSyntax, "a document with more than one root line must be an object; line %d is neither a key-value line nor an array header", first.num)
		}
	}
	obj := NewObject(0)
	if err := d.keyValue(first, first.content, 0, 0, obj); err != nil {
		return nil, err
	}
	for {
		l := d.peek()
		if l == nil {
			break
		}
		if l.depth != 0 {
			return nil, d.overIndent(l, 0)
		}
		d.next()
		if err := d.keyValue(l, l.content, 0, 0, obj); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

func (d *decoder) overIndent(l *line, want int) error {
	return d.errAt(l, 0, ErrOverIndent, "line at depth %d belongs to no scope (expected depth %d)", l.depth, want)
}

func (d *decoder) fullyConsumed() error {
	if l := d.peek(); l != nil {
		return d.errAt(l, 0, ErrTrailing, "content after the root value")
	}
	return nil
}

// checkDup enforces unique sibling keys in strict mode; non-strict mode
// lets Object.Set apply last-write-wins (spec §14.3).
func (d *decoder) checkDup(obj *Object, key string, l *line, off int) error {
	if d.strict && obj.Has(key) {
		return d.errAt(l, off, ErrDuplicateKey, "duplicate key %q", key)
	}
	return nil
}

// keyValue decodes one key-value line (or keyed array header) whose content
// starts at byte offset off of l.content, at scope depth base.
func (d *decoder) keyValue(l *line, content string, off, base int, obj *Object) error {
	h, ok, err := d.parseHeader(l, content, off)
	if err != nil {
		return err
	}
	if ok {
		if h.key == nil {
			switch {
			case h.keyed:
				return d.errAt(l, off, ErrHeader, "a keyless keyed header is only valid as the document root")
			case h.fields != nil:
				return d.errAt(l, off, ErrHeader, "a keyless header with fields is only valid as the document root")
			default:
				return d.errAt(l, off, ErrHeader, "a keyless array header is only valid as the document root or a list item")
			}
		}
		if err := d.checkDup(obj, *h.key, l, off); err != nil {
			return err
		}
		v, err := d.arrayFromHeader(h, l, base)
		if err != nil {
			return err
		}
		obj.Set(*h.key, v)
		return nil
	}
	key, end, err := d.parseKey(l, content, off)
	if err != nil {
		return err
	}
	if err := d.checkDup(obj, key, l, off); err != nil {
		return err
	}
	restOff := end
	for restOff < len(content) && content[restOff] == ' ' {
		restOff++
	}
	rest := trimSpaces(content[end:])
	switch {
	case rest == "":
		nl := d.peek()
		if nl != nil && nl.depth > base {
			if d.strict && nl.depth > base+1 {
				return d.errAt(nl, 0, ErrDepthJump, "depth jumps from %d to %d", base, nl.depth)
			}
			if err := d.enter(nl); err != nil {
				return err
			}
			child, err := d.objectFields(base + 1)
			d.leave()
			if err != nil {
				return err
			}
			obj.Set(key, child)
			return nil
		}
		obj.Set(key, NewObject(0))
	case rest == "[]":
		obj.Set(key, []any{})
	default:
		v, err := d.primitive(l, rest, off+restOff)
		if err != nil {
			return err
		}
		obj.Set(key, v)
	}
	return nil
}

func (d *decoder) objectFields(base int) (*Object, error) {
	obj := NewObject(0)
	depth := -1
	for {
		l := d.peek()
		if l == nil || l.depth < base {
			return obj, nil
		}
		if depth < 0 {
			depth = l.depth
		}
		if l.depth != depth {
			return nil, d.overIndent(l, depth)
		}
		d.next()
		if err := d.keyValue(l, l.content, 0, depth, obj); err != nil {
			return nil, err
		}
	}
}

// scopeDepth finds the content depth of a scope opened at base: base+1,
// or deeper in non-strict mode.
func (d *decoder) scopeDepth(base int) (int, error) {
	first := d.peek()
	if first == nil || first.depth <= base+1 {
		return base + 1, nil
	}
	if d.strict {
		return 0, d.errAt(first, 0, ErrDepthJump, "depth jumps from %d to %d", base, first.depth)
	}
	return first.depth, nil
}

func (d *decoder) arrayFromHeader(h *header, hl *line, base int) (any, error) {
	if h.length > d.maxLength {
		return nil, d.errAt(hl, h.off, ErrLimit, "declared length %d exceeds the limit %d", h.length, d.maxLength)
	}
	if err := d.enter(hl); err != nil {
		return nil, err
	}
	defer d.leave()
	if h.keyed {
		return d.keyedObject(h, hl, base)
	}
	if h.inline != "" {
		toks := splitDelimited(h.inline, h.delim)
		out := make([]any, 0, len(toks))
		for _, t := range toks {
			v, err := d.primitive(hl, t.s, h.inlineOff+t.off)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if d.strict && len(out) != h.length {
			return nil, d.errAt(hl, h.inlineOff, ErrCount, "declared %d inline values, found %d", h.length, len(out))
		}
		return out, nil
	}
	if h.fields != nil {
		return d.tabular(h, hl, base)
	}
	return d.list(h, hl, base)
}

func (d *decoder) blankBetween(start, end int) (int, bool) {
	// blanks is sorted; find the first blank line after start.
	lo, hi := 0, len(d.blanks)
	for lo < hi {
		m := (lo + hi) / 2
		if d.blanks[m] <= start {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(d.blanks) && d.blanks[lo] < end {
		return d.blanks[lo], true
	}
	return 0, false
}

func (d *decoder) checkBlanks(start, end int, what string) error {
	if start == 0 || !d.strict {
		return nil
	}
	if n, ok := d.blankBetween(start, end); ok {
		return &SyntaxError{Kind: ErrBlankLine, Line: n, Column: 1, Msg: "blank line inside " + what}
	}
	return nil
}

func (d *decoder) tabular(h *header, hl *line, base int) (any, error) {
	rowDepth, err := d.scopeDepth(base)
	if err != nil {
		return nil, err
	}
	leaves := countLeaves(h.fields)
	rows := []any{}
	startLine, endLine := 0, 0
	last := hl
	for !d.strict || len(rows) < h.length {
		l := d.peek()
		if l == nil || l.depth <= base {
			break
		}
		if l.depth != rowDepth {
			return nil, d.overIndent(l, rowDepth)
		}
		if !isDataRow(l.content, h.delim) {
			break
		}
		if startLine == 0 {
			startLine = l.num
		}
		endLine, last = l.num, l
		d.next()
		row, err := d.row(l, l.content, 0, h, leaves)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	if d.strict {
		if len(rows) != h.length {
			return nil, d.errAt(last, 0, ErrCount, "declared %d rows, found %d", h.length, len(rows))
		}
		if err := d.checkBlanks(startLine, endLine, "a tabular array"); err != nil {
			return nil, err
		}
		if l := d.peek(); l != nil && l.depth == rowDepth && !strings.HasPrefix(l.content, "- ") && isDataRow(l.content, h.delim) {
			return nil, d.errAt(l, 0, ErrCount, "declared %d rows, found more", h.length)
		}
	}
	return rows, nil
}

func (d *decoder) row(l *line, content string, off int, h *header, leaves int) (*Object, error) {
	var toks []token
	if content != "" {
		toks = splitDelimited(content, h.delim)
	}
	if len(toks) != leaves {
		return nil, d.errAt(l, off, ErrWidth, "row has %d cells, header declares %d fields", len(toks), leaves)
	}
	vals := make([]any, len(toks))
	for i, t := range toks {
		v, err := d.primitive(l, t.s, off+t.off)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	i := 0
	return buildRow(h.fields, vals, &i), nil
}

func buildRow(fields []field, vals []any, i *int) *Object {
	obj := NewObject(len(fields))
	for _, f := range fields {
		if f.children != nil {
			obj.Set(f.name, buildRow(f.children, vals, i))
			continue
		}
		obj.Set(f.name, vals[*i])
		*i++
	}
	return obj
}

func countLeaves(fields []field) int {
	n := 0
	for _, f := range fields {
		if f.children != nil {
			n += countLeaves(f.children)
		} else {
			n++
		}
	}
	return n
}

func (d *decoder) keyedObject(h *header, hl *line, base int) (any, error) {
	entryDepth, err := d.scopeDepth(base)
	if err != nil {
		return nil, err
	}
	leaves := countLeaves(h.fields)
	obj := NewObject(0)
	count, startLine, endLine := 0, 0, 0
	last := hl
	for {
		l := d.peek()
		if l == nil || l.depth <= base {
			break
		}
		if l.depth != entryDepth {
			return nil, d.overIndent(l, entryDepth)
		}
		if findUnquoted(l.content, ':', 0) < 0 {
			return nil, d.errAt(l, 0, ErrSyntax, "expected an entry row (key: cells) in a keyed tabular object")
		}
		d.next()
		if startLine == 0 {
			startLine = l.num
		}
		endLine, last = l.num, l
		key, end, err := d.parseKey(l, l.content, 0)
		if err != nil {
			return nil, err
		}
		if err := d.checkDup(obj, key, l, 0); err != nil {
			return nil, err
		}
		cellOff := end
		for cellOff < len(l.content) && l.content[cellOff] == ' ' {
			cellOff++
		}
		row, err := d.row(l, trimSpaces(l.content[end:]), cellOff, h, leaves)
		if err != nil {
			return nil, err
		}
		obj.Set(key, row)
		count++
	}
	if d.strict {
		if count != h.length {
			return nil, d.errAt(last, 0, ErrCount, "declared %d entries, found %d", h.length, count)
		}
		if err := d.checkBlanks(startLine, endLine, "a keyed tabular object"); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

func isListItem(content string) bool {
	return content == "-" || strings.HasPrefix(content, "- ")
}

func (d *decoder) list(h *header, hl *line, base int) (any, error) {
	itemDepth, err := d.scopeDepth(base)
	if err != nil {
		return nil, err
	}
	items := []any{}
	startLine, endLine := 0, 0
	last := hl
	for !d.strict || len(items) < h.length {
		l := d.peek()
		if l == nil || l.depth <= base {
			break
		}
		if l.depth != itemDepth {
			return nil, d.overIndent(l, itemDepth)
		}
		if !isListItem(l.content) {
			break
		}
		if startLine == 0 {
			startLine = l.num
		}
		v, err := d.listItem(itemDepth)
		if err != nil {
			return nil, err
		}
		endLine, last = d.last.num, d.last
		items = append(items, v)
	}
	if d.strict {
		if len(items) != h.length {
			return nil, d.errAt(last, 0, ErrCount, "declared %d list items, found %d", h.length, len(items))
		}
		if err := d.checkBlanks(startLine, endLine, "a list array"); err != nil {
			return nil, err
		}
		if l := d.peek(); l != nil && l.depth == itemDepth && strings.HasPrefix(l.content, "- ") {
			return nil, d.errAt(l, 0, ErrCount, "declared %d list items, found more", h.length)
		}
	}
	return items, nil
}

func (d *decoder) listItem(base int) (any, error) {
	l := d.next()
	if l.content == "-" {
		return NewObject(0), nil
	}
	off := 2
	for off < len(l.content) && l.content[off] == ' ' {
		off++
	}
	after := l.content[off:]
	switch trimSpaces(after) {
	case "":
		return NewObject(0), nil
	case "[]":
		return []any{}, nil
	}
	h, ok, err := d.parseHeader(l, after, off)
	if err != nil {
		return nil, err
	}
	if ok && h.key == nil && isArrayHeaderContent(after) {
		if h.keyed {
			return nil, d.errAt(l, off, ErrHeader, "a keyless keyed header is only valid as the document root")
		}
		if h.fields != nil {
			return nil, d.errAt(l, off, ErrHeader, "a keyless header with fields is only valid as the document root")
		}
		return d.arrayFromHeader(h, l, base)
	}
	if ok && h.key != nil && h.fields != nil {
		if err := d.enter(l); err != nil {
			return nil, err
		}
		defer d.leave()
		obj := NewObject(0)
		v, err := d.arrayFromHeader(h, l, base+1)
		if err != nil {
			return nil, err
		}
		obj.Set(*h.key, v)
		if err := d.siblings(base+1, obj); err != nil {
			return nil, err
		}
		return obj, nil
	}
	if findUnquoted(after, ':', 0) >= 0 {
		if err := d.enter(l); err != nil {
			return nil, err
		}
		defer d.leave()
		obj := NewObject(0)
		if err := d.keyValue(l, after, off, base+1, obj); err != nil {
			return nil, err
		}
		if err := d.siblings(base+1, obj); err != nil {
			return nil, err
		}
		return obj, nil
	}
	return d.primitive(l, after, off)
}

// siblings decodes the remaining fields of a list-item object.
func (d *decoder) siblings(depth int, obj *Object) error {
	for {
		l := d.peek()
		if l == nil || l.depth < depth {
			return nil
		}
		if l.depth != depth {
			return d.overIndent(l, depth)
		}
		d.next()
		if err := d.keyValue(l, l.content, 0, depth, obj); err != nil {
			return err
		}
	}
}

// ---- tokens ----

func trimSpaces(s string) string {
	i, j := 0, len(s)
	for i < j && s[i] == ' ' {
		i++
	}
	for j > i && s[j-1] == ' ' {
		j--
	}
	return s[i:j]
}

// findUnquoted returns the index of the first c outside double quotes at or
// after start, or -1. Backslash escapes are honoured inside quotes.
func findUnquoted(s string, c byte, start int) int {
	in := false
	for i := start; i < len(s); i++ {
		switch ch := s[i]; {
		case in && ch == '\\' && i+1 < len(s):
			i++
		case ch == '"':
			in = !in
		case ch == c && !in:
			return i
		}
	}
	return -1
}

func findClosingQuote(s string, open int) int {
	for i := open + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				i++
			}
		case '"':
			return i
		}
	}
	return -1
}

func isArrayHeaderContent(s string) bool {
	return strings.HasPrefix(trimSpaces(s), "[") && findUnquoted(s, ':', 0) >= 0
}

func isDataRow(content string, delim byte) bool {
	colon := findUnquoted(content, ':', 0)
	if colon < 0 {
		return true
	}
	dp := findUnquoted(content, delim, 0)
	return dp >= 0 && dp < colon
}

type token struct {
	s   string
	off int
}

// splitDelimited splits on unquoted delim and trims U+0020 around each
// token (spec §11.2); empty input yields no tokens.
func splitDelimited(s string, delim byte) []token {
	if s == "" {
		return nil
	}
	toks := make([]token, 0, 8)
	in := false
	start := 0
	emit := func(a, b int) {
		for a < b && s[a] == ' ' {
			a++
		}
		for b > a && s[b-1] == ' ' {
			b--
		}
		toks = append(toks, token{s: s[a:b], off: a})
	}
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case in && ch == '\\' && i+1 < len(s):
			i++
		case ch == '"':
			in = !in
		case ch == delim && !in:
			emit(start, i)
			start = i + 1
		}
	}
	emit(start, len(s))
	return toks
}

// primitive decodes an unquoted or quoted value token (spec §4).
func (d *decoder) primitive(l *line, tok string, off int) (any, error) {
	t := trimSpaces(tok)
	if t == "" {
		return "", nil
	}
	switch t[0] {
	case '"':
		return d.quoted(l, t, off)
	case 't':
		if t == "true" {
			return true, nil
		}
	case 'f':
		if t == "false" {
			return false, nil
		}
	case 'n':
		if t == "null" {
			return nil, nil
		}
	}
	if isNumericLiteral(t) {
		c, ok := Canonical(t)
		if ok {
			return Number(c), nil
		}
	}
	return t, nil
}

// isNumericLiteral matches /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:e[+-]?\d+)?$/i:
// the decoder grammar, which rejects forbidden leading zeros.
func isNumericLiteral(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i < len(s) && s[i] == '0' && i+1 < len(s) && isDigit(s[i+1]) {
		return false
	}
	return isDecimalTail(s, i)
}

func (d *decoder) quoted(l *line, t string, off int) (string, error) {
	end := findClosingQuote(t, 0)
	if end < 0 {
		return "", d.errAt(l, off, ErrString, "unterminated string")
	}
	if end != len(t)-1 {
		return "", d.errAt(l, off+end+1, ErrString, "unexpected characters after closing quote")
	}
	return d.unescape(l, t[1:end], off+1)
}

func (d *decoder) unescape(l *line, s string, off int) (string, error) {
	bs := strings.IndexByte(s, '\\')
	if bs < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:bs])
	for i := bs; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", d.errAt(l, off+i, ErrString, "backslash at end of string")
		}
		switch s[i+1] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\':
			b.WriteByte('\\')
		case '"':
			b.WriteByte('"')
		case 'u':
			if i+6 > len(s) {
				return "", d.errAt(l, off+i, ErrString, "truncated \\u escape")
			}
			n, err := strconv.ParseUint(s[i+2:i+6], 16, 32)
			if err != nil || strings.ContainsAny(s[i+2:i+6], "+-_") {
				return "", d.errAt(l, off+i, ErrString, "\\u must be followed by four hex digits")
			}
			if n >= 0xD800 && n <= 0xDFFF {
				return "", d.errAt(l, off+i, ErrString, "\\u%s is a surrogate; supplementary characters must appear as literal UTF-8", s[i+2:i+6])
			}
			b.WriteRune(rune(n))
			i += 4
		default:
			return "", d.errAt(l, off+i, ErrString, "invalid escape \\%c", s[i+1])
		}
		i++
	}
	return b.String(), nil
}

// parseKey reads a key token and the colon after it (spec §7.4). end is the
// offset just past the colon.
func (d *decoder) parseKey(l *line, content string, off int) (string, int, error) {
	if strings.HasPrefix(content, "\"") {
		end := findClosingQuote(content, 0)
		if end < 0 {
			return "", 0, d.errAt(l, off, ErrString, "unterminated quoted key")
		}
		key, err := d.unescape(l, content[1:end], off+1)
		if err != nil {
			return "", 0, err
		}
		p := end + 1
		for p < len(content) && content[p] == ' ' {
			p++
		}
		if p >= len(content) || content[p] != ':' {
			return "", 0, d.errAt(l, off+p, ErrSyntax, "missing colon after key")
		}
		return key, p + 1, nil
	}
	colon := findUnquoted(content, ':', 0)
	if colon < 0 {
		return "", 0, d.errAt(l, off, ErrSyntax, "missing colon after key")
	}
	return trimSpaces(content[:colon]), colon + 1, nil
}
