// Package providers links every model backend into a binary, so llm.New can build any
// provider named in agent.yaml:
//
//	import _ "github.com/skein-mesh/skein/pkg/llm/providers"
package providers

import (
	_ "github.com/skein-mesh/skein/pkg/llm/anthropic" // registers "anthropic"
	_ "github.com/skein-mesh/skein/pkg/llm/openai"    // registers "openai"
	_ "github.com/skein-mesh/skein/pkg/llm/scripted"  // registers "scripted"
)
