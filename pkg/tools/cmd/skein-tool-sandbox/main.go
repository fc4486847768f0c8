//go:build linux

// Command skein-tool-sandbox is the trampoline a toolhost starts each tool through where it
// cannot set a tool's resource limits itself (see tools.sandbox.start): a small program that sets
// them on itself and execs the tool. The host binary can play this part too, but it is a large
// program and starting it costs a millisecond or two per call more; a toolhost uses this one
// when it finds it next to its own binary (or at tools.sandbox.trampoline).
//
// All of its work happens in package trampoline's init, before main. It imports nothing else,
// so that starting it costs no more than the Go runtime's own start.
package main

import (
	"syscall"

	"github.com/skein-mesh/skein/pkg/tools/internal/trampoline"
)

func main() {
	msg := "skein-tool-sandbox starts skein's tools for a toolhost; it is not run by hand (its argv[0] must be " + trampoline.Arg0 + ")\n"
	_, _ = syscall.Write(2, []byte(msg))
	syscall.Exit(2)
}
