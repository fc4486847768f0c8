// Command miner mines finished sessions on the TRACE stream into guidelines for memoryd.
package main

import (
	"os"

	"github.com/skein-mesh/skein/miner"
	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/service"
)

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	os.Exit(service.Main("miner", func(d service.Deps) error {
		return miner.Run(d.Ctx, miner.Deps{Conn: d.Conn, Names: d.Names, Config: d.Config, Logger: d.Logger, Home: d.Home, Ready: d.Ready})
	}))
}
