package toon

import (
	"fmt"
	"strconv"
	"strings"
)

// header is a parsed array or keyed header (spec §6).
type header struct {
	key       *string
	length    int
	delim     byte
	keyed     bool
	fields    []field
	inline    string // trimmed content after the colon
	inlineOff int    // offset of inline within the line content
	off       int    // offset of the header within the line content
}

// parseHeader recognizes an array header in content (which starts at byte
// off of l.content). ok is false when content is not a header; a malformed
// header is an error in strict mode and falls through (ok false) otherwise.
func (d *decoder) parseHeader(l *line, content string, off int) (*header, bool, error) {
	h, reason, at, err := d.headerSyntax(l, content, off)
	if err != nil {
		return nil, false, err
	}
	if reason != "" {
		if d.strict {
			return nil, false, d.errAt(l, off+at, ErrHeader, "%s", reason)
		}
		return nil, false, nil
	}
	return h, h != nil, nil
}

// headerSyntax returns (nil, "", 0, nil) for "not a header", a reason and
// offset for a malformed header, or the header.
func (d *decoder) headerSyntax(l *line, content string, off int) (*header, string, int, error) {
	var bracketStart int
	if strings.HasPrefix(content, "\"") {
		q := findClosingQuote(content, 0)
		if q < 0 || q+1 >= len(content) || content[q+1] != '[' {
			return nil, "", 0, nil
		}
		bracketStart = q + 1
	} else {
		bracketStart = findUnquoted(content, '[', 0)
		if bracketStart < 0 {
			return nil, "", 0, nil
		}
	}
	firstColon := findUnquoted(content, ':', 0)
	if firstColon < 0 || firstColon < bracketStart {
		return nil, "", 0, nil
	}
	bracketEnd := findUnquoted(content, ']', bracketStart)
	if bracketEnd < 0 {
		return nil, "unterminated bracket segment", bracketStart, nil
	}
	braceEnd := bracketEnd + 1
	braceStart := findUnquoted(content, '{', bracketEnd)
	if braceStart >= 0 {
		if c := findUnquoted(content, ':', bracketEnd); c >= 0 && braceStart < c {
			if braceStart != bracketEnd+1 {
				return nil, "unexpected content between bracket segment and field list", bracketEnd + 1, nil
			}
			if m := matchBrace(content, braceStart); m >= 0 {
				braceEnd = m + 1
			}
		} else {
			braceStart = -1
		}
	}
	from := bracketEnd
	if braceEnd > from {
		from = braceEnd
	}
	colon := findUnquoted(content, ':', from)
	if colon < 0 {
		return nil, "missing colon after array header", len(content), nil
	}
	if colon != braceEnd {
		return nil, "unexpected content between header and colon", braceEnd, nil
	}
	h := &header{off: off}
	if bracketStart > 0 {
		raw := content[:bracketStart]
		if c := raw[len(raw)-1]; c == ' ' || c == '\t' {
			return nil, "unexpected whitespace between key and bracket segment", bracketStart - 1, nil
		}
		key := raw
		if raw[0] == '"' {
			k, err := d.quoted(l, trimSpaces(raw), off)
			if err != nil {
				return nil, "", 0, err
			}
			key = k
		}
		h.key = &key
	}
	inlineOff := colon + 1
	for inlineOff < len(content) && content[inlineOff] == ' ' {
		inlineOff++
	}
	h.inline = trimSpaces(content[colon+1:])
	h.inlineOff = off + inlineOff

	seg := content[bracketStart+1 : bracketEnd]
	h.delim = ','
	if n := len(seg); n > 0 && (seg[n-1] == '\t' || seg[n-1] == '|') {
		h.delim = seg[n-1]
		seg = seg[:n-1]
	}
	if n := len(seg); n > 0 && seg[n-1] == ':' {
		h.keyed = true
		seg = seg[:n-1]
	}
	if !validLength(seg) {
		return nil, "invalid array length [" + content[bracketStart+1:bracketEnd] + "] (want a non-negative integer without leading zeros)", bracketStart + 1, nil
	}
	n, err := strconv.Atoi(seg)
	if err != nil || n > d.maxLength {
		return nil, "", 0, d.errAt(l, off+bracketStart+1, ErrLimit, "declared length %s exceeds the limit %d", seg, d.maxLength)
	}
	h.length = n
	if braceStart >= 0 && braceEnd > braceStart+1 && braceEnd <= colon {
		inner := content[braceStart+1 : braceEnd-1]
		for _, other := range []byte{',', '\t', '|'} {
			if other != h.delim && findUnquoted(inner, other, 0) >= 0 {
				return nil, "header delimiter mismatch: bracket declares " + delimName(h.delim) + " but the field list contains " + delimName(other), braceStart, nil
			}
		}
		fields, reason := d.parseFields(l, inner, off+braceStart+1, h.delim)
		if reason != "" {
			return nil, reason, braceStart, nil
		}
		h.fields = fields
	}
	if h.keyed && h.fields == nil {
		return nil, "a keyed header requires a field list", bracketEnd + 1, nil
	}
	if h.fields != nil {
		if h.inline != "" {
			return nil, "unexpected content after a header with fields", inlineOff, nil
		}
		if d.strict {
			if name, dup := duplicateField(h.fields); dup {
				return nil, "", 0, d.errAt(l, off+braceStart, ErrDuplicateKey, "duplicate field name %q", name)
			}
		}
	}
	return h, "", 0, nil
}

func delimName(c byte) string {
	switch c {
	case '\t':
		return "tab"
	case '|':
		return "pipe"
	}
	return "comma"
}

func validLength(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// matchBrace returns the index of the brace closing the one at open,
// ignoring braces inside quotes, or -1.
func matchBrace(s string, open int) int {
	in := false
	depth := 0
	for i := open; i < len(s); i++ {
		switch ch := s[i]; {
		case in && ch == '\\' && i+1 < len(s):
			i++
		case ch == '"':
			in = !in
		case in:
		case ch == '{':
			depth++
		case ch == '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// parseFields parses a fields segment (spec §6, §9.3) in one pass with a
// stack of open groups, so that deeply nested groups cost linear time.
func (d *decoder) parseFields(l *line, s string, off int, delim byte) ([]field, string) {
	type group struct {
		name   string
		fields []field
	}
	stack := []group{{}}
	entryStart := 0
	closed := false // the current entry was a nested group that has closed
	finish := func(end int) string {
		if closed {
			closed = false
			return ""
		}
		e := trimSpaces(s[entryStart:end])
		if e == "" {
			return "empty field name in field list"
		}
		lead := entryStart
		for lead < end && s[lead] == ' ' {
			lead++
		}
		name, reason := d.fieldName(l, e, off+lead)
		if reason != "" {
			return reason
		}
		top := &stack[len(stack)-1]
		top.fields = append(top.fields, field{name: name})
		return ""
	}
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if in {
			if c == '\\' && i+1 < len(s) {
				i++
			} else if c == '"' {
				in = false
			}
			continue
		}
		switch c {
		case '"':
			if closed {
				return nil, "unexpected content after nested field group"
			}
			in = true
		case '{':
			if closed {
				return nil, "unexpected content after nested field group"
			}
			lead := entryStart
			for lead < i && s[lead] == ' ' {
				lead++
			}
			raw := s[lead:i]
			if raw == "" {
				return nil, "missing field name before nested field group"
			}
			if raw[len(raw)-1] == ' ' {
				return nil, "unexpected whitespace before nested field group"
			}
			name, reason := d.fieldName(l, raw, off+lead)
			if reason != "" {
				return nil, reason
			}
			if len(stack) > d.maxDepth {
				return nil, fmt.Sprintf("field groups nested deeper than %d levels", d.maxDepth)
			}
			stack = append(stack, group{name: name})
			entryStart = i + 1
		case '}':
			if len(stack) == 1 {
				return nil, "unmatched brace in field list"
			}
			if reason := finish(i); reason != "" {
				return nil, reason
			}
			g := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			top := &stack[len(stack)-1]
			top.fields = append(top.fields, field{name: g.name, children: g.fields})
			closed = true
			entryStart = i + 1
		case delim:
			if reason := finish(i); reason != "" {
				return nil, reason
			}
			entryStart = i + 1
		case ' ':
		default:
			if closed {
				return nil, "unexpected content after nested field group"
			}
		}
	}
	if len(stack) > 1 {
		return nil, "unmatched brace in field list"
	}
	if reason := finish(len(s)); reason != "" {
		return nil, reason
	}
	return stack[0].fields, ""
}

func (d *decoder) fieldName(l *line, s string, off int) (string, string) {
	if !strings.HasPrefix(s, "\"") {
		return s, ""
	}
	name, err := d.quoted(l, s, off)
	if err != nil {
		return "", err.(*SyntaxError).Msg
	}
	return name, ""
}

func duplicateField(fields []field) (string, bool) {
	seen := make(map[string]struct{}, len(fields))
	for _, f := range fields {
		if _, ok := seen[f.name]; ok {
			return f.name, true
		}
		seen[f.name] = struct{}{}
		if f.children != nil {
			if n, ok := duplicateField(f.children); ok {
				return n, true
			}
		}
	}
	return "", false
}
