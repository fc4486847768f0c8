package e2e

import (
	"os"
	"testing"

	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
)

// TestMain lets go of the Milvus server the run shares (started only if a test asked for it).
func TestMain(m *testing.M) { os.Exit(milvustest.Main(m)) }
