// Package kvtest gives other packages' tests and benchmarks the KV memory store on a real
// embedded NATS.
package kvtest

import (
	"context"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/bus/bustest"
	"github.com/skein-mesh/skein/pkg/memory/kvstore"
	"github.com/skein-mesh/skein/pkg/memory/storetest"
)

// Filled opens a KV store for model's vectors of dim on a fresh embedded mesh, holding n random
// entries (storetest.RandomEntries, seed 1), until the test ends.
func Filled(tb testing.TB, model string, dim, n int) *kvstore.Store {
	tb.Helper()
	m := bustest.Start(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := kvstore.Open(ctx, m.Conn.JS, m.Names, kvstore.Options{Model: model, Dim: dim})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	storetest.Fill(tb, st, storetest.RandomEntries(n, dim, 1), 8)
	return st
}
