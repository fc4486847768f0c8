// Command memoryd serves the mesh's memory: retrieval, ingest, promotion and eviction. Start more
// processes to share the load; they agree through the store.
package main

import (
	"os"

	"github.com/skein-mesh/skein/memoryd"
	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/service"
)

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	os.Exit(service.Main("memoryd", func(d service.Deps) error {
		return memoryd.Run(d.Ctx, memoryd.Deps{Conn: d.Conn, Names: d.Names, Config: d.Config, Logger: d.Logger, Home: d.Home, Ready: d.Ready})
	}))
}
