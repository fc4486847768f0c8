package toon

import (
	"path/filepath"
	"testing"

	"github.com/skein-mesh/skein/pkg/devenv"
)

// nodeModules is where mk/toon.mk installs the pinned npm packages.
func nodeModules(t testing.TB) string {
	return filepath.Join(devenv.ToolsDir(), "node", "node_modules")
}
