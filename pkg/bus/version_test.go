package bus_test

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func bumpVersion(t *testing.T, data []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := msgpack.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["v"] = 99
	out, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
