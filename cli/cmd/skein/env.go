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

// withMesh loads the config, dials the mesh (an embedded one with every service if no URL is
// given) and runs fn.
func withMesh(cmd *cobra.Command, fn func(meshEnv) error) error { return with(cmd, true, fn) }

// withBus is withMesh for commands that only read streams: an embedded mesh starts no services.
func withBus(cmd *cobra.Command, fn func(meshEnv) error) error { return with(cmd, false, fn) }

func with(cmd *cobra.Command, services bool, fn func(meshEnv) error) error {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	conn, names, _, stop, err := dialMeshFull(cmd, cfg, services)
	if err != nil {
		return err
	}
	defer stop()
	return fn(meshEnv{cfg: cfg, conn: conn, names: names})
}
