package harden_test

import (
	"runtime"
	"testing"

	"github.com/skein-mesh/skein/pkg/harden"
)

func TestProcessBecomesNonDumpable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	if d, err := harden.Dumpable(); err != nil || !d {
		t.Fatalf("a test process starts dumpable, got %v %v", d, err)
	}
	if err := harden.Process(); err != nil {
		t.Fatal(err)
	}
	if d, err := harden.Dumpable(); err != nil || d {
		t.Fatalf("after Process: dumpable=%v err=%v, want not dumpable", d, err)
	}
}
