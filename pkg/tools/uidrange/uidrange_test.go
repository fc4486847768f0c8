package uidrange

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in           string
		first, count int
		ok           bool
	}{
		{"1879048192-1879113727", 1879048192, 65536, true},
		{" 1000 - 1000 ", 1000, 1, true},
		{"1-4294967294", 1, 4294967294, true},
		{"0-10", 0, 0, false},          // uid 0 is root
		{"10-9", 0, 0, false},          // reversed
		{"1-4294967295", 0, 0, false},  // the kernel's "no uid"
		{"1000", 0, 0, false},          // not a range
		{"a-b", 0, 0, false},           // not numbers
		{"-5-10", 0, 0, false},         // negative
		{"1-99999999999", 0, 0, false}, // beyond 32 bits
	} {
		first, count, err := Parse(c.in)
		if (err == nil) != c.ok || first != c.first || count != c.count {
			t.Errorf("Parse(%q) = %d, %d, %v; want %d, %d, ok=%v", c.in, first, count, err, c.first, c.count, c.ok)
		}
	}
}
