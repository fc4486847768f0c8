package miner_test

import (
	"os"
	"testing"

	"github.com/skein-mesh/skein/pkg/memory/milvusstore/milvustest"
)

// TestMain lets go of the Milvus server the run shares, when a test here asked for it.
func TestMain(m *testing.M) { os.Exit(milvustest.Main(m)) }
