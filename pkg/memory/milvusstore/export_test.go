package milvusstore

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/skein-mesh/skein/pkg/memory"
)

// SetQueryWindow shrinks the page size of queries for a test and returns the restore func.
func SetQueryWindow(n int) func() {
	old := queryWindow
	queryWindow = n
	return func() { queryWindow = old }
}

// EncodeRecord is the bucket value Put writes for e.
func EncodeRecord(t interface{ Fatal(...any) }, e memory.Entry) []byte {
	b, err := msgpack.Marshal(record{V: recordVersion, Entry: e})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
