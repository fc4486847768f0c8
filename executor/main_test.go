package executor

import (
	"os"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv/devtest"
)

// TestMain deletes the toolhost binary the tests built (see startToolhost).
func TestMain(m *testing.M) {
	code := m.Run()
	devtest.RemoveBuilt()
	os.Exit(code)
}
