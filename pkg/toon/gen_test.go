package toon

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// gen produces seeded random JSON values that stress quoting, key
// encoding, tabular detection and list-item layout.
type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

var adversarialStrings = []string{
	"", " ", "  lead", "trail ", "\tTab", "tab\t", "a,b", "a|b", "a\tb", "a:b", ":", `"quoted"`, `back\slash`,
	"true", "false", "null", "True", "NULL", "42", "-3.14", "05", "+1", "1e3", "1E-6", ".5", "1.", "0x10",
	"1_000", "Infinity", "NaN", "-0", "0.0", "-", "--", "- item", "-x", "#", "# not a comment", "#tag",
	"[]", "[1]", "{}", "{a}", "a[2]: x", "key: value", "\n", "line1\nline2", "cr\r", "\x01ctl", "\x7fdel",
	"\ufeffbom", "nbsp\u00a0", "\u00a0lead", "emoji 🎉", "日本語", "Ünïcödé", "\u2028sep", "x y z",
	"hello, world", "pipe | in", "https://example.com?q=a:b", `C:\path`, "- [2]: a,b", "[0]:", "@user",
	"a#b", "a-b", "__proto__", "constructor", "prototype", "a\"b", "'single'", "\\", "\"", "é", "A",
}

var adversarialKeys = []string{
	"id", "name", "a", "b", "c", "value", "x.y", "user.name", "_private", "my-key", "2key", "key with space",
	"", " ", "__proto__", "constructor", "prototype", "0", "1", "42", "01", "-1", "1.5", "a:b", "a,b", "a|b",
	`"q"`, "#k", "-k", "k\t", "ключ", "🎉", "[x]", "{y}", "a[1]", "toString", "hasOwnProperty", "true", "null",
}

var pieces = []string{"a", "Z", "0", "9", " ", ",", "|", "\t", ":", "\"", "\\", "[", "]", "{", "}", "-", "#",
	"\n", "\r", "\x00", "\x1f", "é", "🎉", "\u00a0", "e", "E", "+", ".", "null", "true", "x", "/", "'"}

func (g *gen) str() string {
	if g.r.IntN(3) > 0 {
		return adversarialStrings[g.r.IntN(len(adversarialStrings))]
	}
	var b strings.Builder
	for n := g.r.IntN(7); n >= 0; n-- {
		b.WriteString(pieces[g.r.IntN(len(pieces))])
	}
	return b.String()
}

func (g *gen) key() string {
	if g.r.IntN(4) > 0 {
		return adversarialKeys[g.r.IntN(len(adversarialKeys))]
	}
	return g.str()
}

func (g *gen) number() any {
	var f float64
	switch g.r.IntN(9) {
	case 0:
		f = float64(g.r.IntN(100))
	case 1:
		f = -float64(g.r.IntN(1 << 20))
	case 2:
		f = g.r.Float64() * 1000
	case 3:
		f = math.Pow(10, float64(g.r.IntN(60)-30)) * (g.r.Float64() + 0.5)
	case 4:
		f = []float64{0, math.Copysign(0, -1), 1e-6, 1e-7, 1e21, 1e20, 0.1, 1.5, 9007199254740992, 123456789012, -0.000001}[g.r.IntN(11)]
	case 5:
		f = float64(g.r.Int64N(1<<53)) * float64(g.r.IntN(3)-1)
	case 6:
		f = math.Float64frombits(g.r.Uint64() & 0x7fefffffffffffff) // any finite
	default:
		f = float64(g.r.IntN(20000)-10000) / 100
	}
	return floatNumber(f)
}

func (g *gen) primitive() any {
	switch g.r.IntN(8) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2, 3:
		return g.number()
	default:
		return g.str()
	}
}

func (g *gen) value(depth int) any {
	if depth >= 4 {
		return g.primitive()
	}
	switch g.r.IntN(10) {
	case 0, 1, 2:
		return g.primitive()
	case 3, 4:
		return g.object(depth)
	case 5:
		return g.keyedObject(depth)
	case 6:
		return g.tabular(depth)
	case 7:
		arr := make([]any, g.r.IntN(6))
		for i := range arr {
			arr[i] = g.primitive()
		}
		return arr
	case 8:
		arr := make([]any, g.r.IntN(4))
		for i := range arr {
			inner := make([]any, g.r.IntN(4))
			for j := range inner {
				if g.r.IntN(6) == 0 {
					inner[j] = g.value(depth + 2)
				} else {
					inner[j] = g.primitive()
				}
			}
			arr[i] = inner
		}
		return arr
	default:
		arr := make([]any, g.r.IntN(5))
		for i := range arr {
			arr[i] = g.value(depth + 1)
		}
		return arr
	}
}

func (g *gen) keys(n int) []string {
	seen := map[string]bool{}
	var ks []string
	for len(ks) < n {
		k := g.key()
		if !seen[k] {
			seen[k] = true
			ks = append(ks, k)
		}
	}
	return ks
}

func (g *gen) object(depth int) any {
	obj := NewObject(0)
	for _, k := range g.keys(g.r.IntN(6)) {
		obj.Set(k, g.value(depth+1))
	}
	return jsKeyOrder(obj)
}

// shape is a uniform object layout: leaf keys and nested groups.
type shape struct {
	keys     []string
	children map[string]*shape
}

func (g *gen) shape(depth int) *shape {
	s := &shape{keys: g.keys(1 + g.r.IntN(4)), children: map[string]*shape{}}
	for _, k := range s.keys {
		if depth < 2 && g.r.IntN(5) == 0 {
			s.children[k] = g.shape(depth + 1)
		}
	}
	return s
}

func (g *gen) fill(s *shape, shuffle bool) *Object {
	keys := append([]string(nil), s.keys...)
	if shuffle {
		g.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	obj := NewObject(len(keys))
	for _, k := range keys {
		if c := s.children[k]; c != nil {
			obj.Set(k, g.fill(c, shuffle))
		} else if g.r.IntN(25) == 0 {
			obj.Set(k, g.value(3)) // occasionally break uniformity
		} else {
			obj.Set(k, g.primitive())
		}
	}
	return jsKeyOrder(obj).(*Object)
}

func (g *gen) tabular(depth int) any {
	s := g.shape(0)
	shuffle := g.r.IntN(4) == 0
	rows := make([]any, 1+g.r.IntN(5))
	for i := range rows {
		rows[i] = g.fill(s, shuffle)
	}
	if depth < 2 && g.r.IntN(3) == 0 {
		// A tabular array as the first field of list-item objects.
		items := make([]any, 1+g.r.IntN(3))
		for i := range items {
			obj := NewObject(0)
			obj.Set("rows", rows)
			for _, k := range g.keys(g.r.IntN(3)) {
				if k != "rows" {
					obj.Set(k, g.value(depth+2))
				}
			}
			items[i] = jsKeyOrder(obj)
		}
		return items
	}
	return rows
}

func (g *gen) keyedObject(depth int) any {
	s := g.shape(0)
	obj := NewObject(0)
	for _, k := range g.keys(1 + g.r.IntN(4)) {
		obj.Set(k, g.fill(s, g.r.IntN(4) == 0))
	}
	if depth < 2 && g.r.IntN(3) == 0 {
		item := NewObject(0)
		item.Set("byKey", obj)
		item.Set("note", g.primitive())
		return []any{item, g.primitive()}
	}
	return jsKeyOrder(obj)
}

// jsKeyOrder orders object keys as JavaScript objects do: array-index keys
// first in ascending numeric order, then the rest in insertion order. The
// reference implementation cannot represent any other order for them.
func jsKeyOrder(v any) any {
	switch x := v.(type) {
	case *Object:
		type kv struct {
			k   string
			v   any
			idx uint64
			is  bool
		}
		items := make([]kv, x.Len())
		for i := range x.keys {
			idx, is := arrayIndex(x.keys[i])
			items[i] = kv{x.keys[i], jsKeyOrder(x.vals[i]), idx, is}
		}
		sort.SliceStable(items, func(i, j int) bool {
			a, b := items[i], items[j]
			if a.is != b.is {
				return a.is
			}
			return a.is && a.idx < b.idx
		})
		out := NewObject(len(items))
		for _, it := range items {
			out.Set(it.k, it.v)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsKeyOrder(x[i])
		}
		return out
	}
	return v
}

func arrayIndex(k string) (uint64, bool) {
	if k == "" || len(k) > 10 || (k[0] == '0' && len(k) > 1) {
		return 0, false
	}
	n, err := strconv.ParseUint(k, 10, 64)
	if err != nil || n > 4294967294 {
		return 0, false
	}
	return n, true
}

// equalUnordered is JSON-model equality with object key order ignored.
func equalUnordered(a, b any) bool {
	switch x := a.(type) {
	case *Object:
		y, ok := b.(*Object)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			yv, ok := y.Get(k)
			if !ok || !equalUnordered(x.vals[i], yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalUnordered(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return Equal(a, b)
}
