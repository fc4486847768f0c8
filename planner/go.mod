module github.com/skein-mesh/skein/planner

go 1.26.8

require github.com/skein-mesh/skein/pkg v0.0.0

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/skein-mesh/skein/pkg => ../pkg

// Tests run the planner in an in-process mesh with a real gateway and executor.
require (
	github.com/skein-mesh/skein/executor v0.0.0
	github.com/skein-mesh/skein/gateway v0.0.0
)

replace github.com/skein-mesh/skein/executor => ../executor

replace github.com/skein-mesh/skein/gateway => ../gateway
