package main

import (
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/bus"
	"github.com/skein-mesh/skein/pkg/config"
	"github.com/skein-mesh/skein/pkg/protocol"
)

// meshEnv is what a command that talks to the mesh gets.
type meshEnv struct {
	cfg   *config.Config
	conn  *bus.Conn
	names protocol.Names
}

// withMesh loads the config, reaches the mesh (see dialExisting; opening the state under
// $SKEIN_HOME, it runs memoryd too) and runs fn: for the commands that ask memoryd.
func withMesh(cmd *cobra.Command, fn func(meshEnv) error) error {
	return with(cmd, roleSet{"memoryd": true}, fn)
}

// withBus is withMesh for commands that only read and write streams and buckets: opening the
// state under $SKEIN_HOME, it runs no role.
func withBus(cmd *cobra.Command, fn func(meshEnv) error) error { return with(cmd, roleSet{}, fn) }

func with(cmd *cobra.Command, roles roleSet, fn func(meshEnv) error) error {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return configError(err)
	}
	conn, names, stop, err := dialExisting(cmd, cfg, roles)
	if err != nil {
		return err
	}
	defer stop()
	return fn(meshEnv{cfg: cfg, conn: conn, names: names})
}
