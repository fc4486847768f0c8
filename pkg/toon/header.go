package toon

import (
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
		fields, reason := d.parseFields(l, inner, off+braceStart+1, h.delim, 0)
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

const maxFieldNesting = 64

// parseFields parses a fields segment recursively (spec §6, §9.3).
func (d *decoder) parseFields(l *line, s string, off int, delim byte, nest int) ([]field, string) {
	if nest > maxFieldNesting {
		return nil, "field groups nested too deeply"
	}
	var fields []field
	in := false
	depth := 0
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			ch := s[i]
			switch {
			case in && ch == '\\' && i+1 < len(s):
				i++
				continue
			case ch == '"':
				in = !in
				continue
			case in:
				continue
			case ch == '{':
				depth++
				continue
			case ch == '}':
				depth--
				continue
			case ch != delim || depth != 0:
				continue
			}
		}
		f, reason := d.parseField(l, s[start:i], off+start, delim, nest)
		if reason != "" {
			return nil, reason
		}
		fields = append(fields, f)
		start = i + 1
	}
	return fields, ""
}

func (d *decoder) parseField(l *line, entry string, off int, delim byte, nest int) (field, string) {
	lead := 0
	for lead < len(entry) && entry[lead] == ' ' {
		lead++
	}
	e := trimSpaces(entry)
	off += lead
	if e == "" {
		return field{}, "empty field name in field list"
	}
	g := findUnquoted(e, '{', 0)
	if g < 0 {
		name, reason := d.fieldName(l, e, off)
		return field{name: name}, reason
	}
	namePart := e[:g]
	if namePart == "" {
		return field{}, "missing field name before nested field group"
	}
	if strings.HasSuffix(namePart, " ") {
		return field{}, "unexpected whitespace before nested field group"
	}
	m := matchBrace(e, g)
	if m < 0 {
		return field{}, "unmatched brace in field list"
	}
	if m != len(e)-1 {
		return field{}, "unexpected content after nested field group"
	}
	children, reason := d.parseFields(l, e[g+1:m], off+g+1, delim, nest+1)
	if reason != "" {
		return field{}, reason
	}
	name, reason := d.fieldName(l, namePart, off)
	return field{name: name, children: children}, reason
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
