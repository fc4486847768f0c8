// Package uidrange reads tools.sandbox.uids, the range of uids tool calls run as. It is a leaf,
// so the configuration checks the value without importing the tool runtime.
package uidrange

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads "first-last": two uids with 0 < first <= last < 4294967295 (the largest uid is
// the kernel's "no uid").
func Parse(s string) (first, count int, err error) {
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	hi, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil || lo == 0 || hi < lo || hi >= 1<<32-1 {
		return 0, 0, fmt.Errorf("want first-last, two uids with 0 < first <= last < 4294967295, got %q", s)
	}
	return int(lo), int(hi-lo) + 1, nil
}
