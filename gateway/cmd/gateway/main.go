// Command gateway runs the mesh's front door as its own process.
package main

import (
	"flag"
	"os"

	"github.com/skein-mesh/skein/gateway"
	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/service"
)

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	http := flag.String("http", "", "serve the HTTP API on this address (e.g. 127.0.0.1:8080)")
	os.Exit(service.Main("gateway", func(d service.Deps) error {
		return gateway.Run(d.Ctx, gateway.Deps{Conn: d.Conn, Names: d.Names, Config: d.Config, Logger: d.Logger, Home: d.Home, HTTPAddr: *http, Ready: d.Ready})
	}))
}
