package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"
)

// ByteSize is an amount of bytes in a config file: an integer (1048576), or a number with a
// unit, decimal or binary as written: 1KB is 1000 bytes, 1KiB 1024 (B, KB, MB, GB, TB, KiB,
// MiB, GiB, TiB; the case of the unit does not matter, a space may come before it).
type ByteSize int64

// sizeHint is what a config error says a ByteSize takes.
const sizeHint = "a size in bytes: an integer, or a number and a unit such as 64MiB or 1GB (KB = 1000 bytes, KiB = 1024)"

// UnmarshalYAML reads an integer or a size with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	mismatch := func() error {
		// Phrased as yaml.v3's own type errors, so the loader names the file, line and key.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into config.ByteSize", n.Line, n.ShortTag(), n.Value)}}
	}
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into config.ByteSize", n.Line, n.ShortTag())}}
	}
	s := strings.TrimSpace(n.Value)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*b = ByteSize(i) // a negative number is read, and refused by Validate with its reason
		return nil
	}
	u, err := humanize.ParseBytes(s)
	if err != nil || u > math.MaxInt64 || s == "" || !strings.ContainsAny(s[:1], "0123456789.") {
		return mismatch()
	}
	*b = ByteSize(u)
	return nil
}
