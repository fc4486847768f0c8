package main

import (
	"github.com/spf13/cobra"

	"github.com/skein-mesh/skein/pkg/llm/scripted"
)

func init() { extraCommands = append(extraCommands, newScriptHelp) }

// newScriptHelp is the help topic `skein help script`: the scripted model's rule file, which the
// scaffolded agent.offline.yaml and script.yaml point to.
func newScriptHelp() *cobra.Command {
	return &cobra.Command{
		Use:   "script",
		Short: "The scripted model's rule file (llm.provider: scripted; offline, no key)",
		Long:  scripted.Help,
	}
}
