module github.com/skein-mesh/skein/miner

go 1.26.8

require (
	github.com/skein-mesh/skein/memoryd v0.0.0
	github.com/skein-mesh/skein/pkg v0.0.0
)

replace github.com/skein-mesh/skein/pkg => ../pkg

replace github.com/skein-mesh/skein/memoryd => ../memoryd
