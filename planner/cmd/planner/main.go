// Command planner runs a planner process; start several to share the load or take over sessions.
package main

import (
	"os"

	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/planner"
)

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	os.Exit(service.Main("planner", func(d service.Deps) error {
		return planner.Run(d.Ctx, planner.Deps{Conn: d.Conn, Names: d.Names, Config: d.Config, Logger: d.Logger, Home: d.Home, Ready: d.Ready})
	}))
}
