// Command executor runs steps for the agent named in its config; start more to scale it.
package main

import (
	"flag"
	"os"

	"github.com/skein-mesh/skein/executor"
	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/service"
)

func main() {
	conc := flag.Int("concurrency", 0, "steps run at once (default executor.concurrency, else 8 per CPU, at least 8)")
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	os.Exit(service.Main("executor", func(d service.Deps) error {
		return executor.Run(d.Ctx, executor.Deps{Conn: d.Conn, Names: d.Names, Config: d.Config, Logger: d.Logger, Home: d.Home, Ready: d.Ready,
			Concurrency: *conc})
	}))
}
