package e2e

import (
	"os"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
)

// TestMain serves two jobs: started as the overhead benchmark's echo responder (echoEnv set),
// the test binary only answers requests; otherwise it runs the tests and then lets go of the
// Milvus server the run shares (started only if a test asked for it) and of the binaries the
// run built (half a gigabyte a run, which piled up in the temp folder).
func TestMain(m *testing.M) {
	if url := os.Getenv(echoEnv); url != "" {
		os.Exit(echoResponder(url))
	}
	code := milvustest.Main(m)
	devtest.RemoveBuilt()
	os.Exit(code)
}
