package retrieve_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/skein-mesh/skein/pkg/embed/embedtest"
	"github.com/skein-mesh/skein/pkg/memory/kvstore/kvtest"
	"github.com/skein-mesh/skein/pkg/memory/retrieve"
	"github.com/skein-mesh/skein/pkg/poll"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// BenchmarkRetrieveKV measures a whole retrieval (two tier searches, a tool search, selection,
// sanitizing and the token budget) over the KV store, without the embedding itself (a hash
// embedder), at several memory sizes.
func BenchmarkRetrieveKV(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			emb := embedtest.Hash{Dimensions: 384, ID: "bench"}
			st := kvtest.Filled(b, emb.Model(), emb.Dim(), n)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			poll.True(b, time.Minute, fmt.Sprintf("the store to hold %d entries", n), func() bool { return st.Len() >= n })
			r := retrieve.New(st, emb, retrieve.Options{})
			req := protocol.RetrieveRequest{Agent: "agent0", Task: "run the go tests and report failures", Tools: []string{"go_test", "git"}}
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.Retrieve(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
