// Command toolhost serves the tools its config enables; start more of them to share the load.
package main

import (
	"flag"
	"os"

	"github.com/skein-mesh/skein/pkg/harden"
	"github.com/skein-mesh/skein/pkg/service"
	"github.com/skein-mesh/skein/toolhost"
)

func main() {
	_ = harden.Process() // provider keys and credentials live in this process: see pkg/harden
	hostID := flag.String("host-id", "", "name of this toolhost in replies and logs (default hostname-pid-random)")
	conc := flag.Int("concurrency", 0, "tool processes run at once (default toolhost.concurrency, else 4 per CPU, at least 8)")
	queue := flag.Int("queue", 0, "calls that may wait for a slot before more are refused as busy (default toolhost.queue, else as many as --concurrency; -1: none)")
	os.Exit(service.Main("toolhost", func(d service.Deps) error {
		return toolhost.Run(d.Ctx, toolhost.Deps{Conn: d.Conn, Names: d.Names, Config: d.Config, Logger: d.Logger,
			Home: d.Home, HostID: *hostID, Concurrency: *conc, Queue: *queue, Ready: d.Ready})
	}))
}
