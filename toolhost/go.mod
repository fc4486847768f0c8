module github.com/skein-mesh/skein/toolhost

go 1.26.8

require github.com/skein-mesh/skein/pkg v0.0.0

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/skein-mesh/skein/pkg => ../pkg

// Tests run agents as tools on an in-process mesh; the toolhost itself imports none of these.
require (
	github.com/skein-mesh/skein/executor v0.0.0
	github.com/skein-mesh/skein/gateway v0.0.0
	github.com/skein-mesh/skein/memoryd v0.0.0
	github.com/skein-mesh/skein/miner v0.0.0
	github.com/skein-mesh/skein/planner v0.0.0
)

replace github.com/skein-mesh/skein/executor => ../executor

replace github.com/skein-mesh/skein/gateway => ../gateway

replace github.com/skein-mesh/skein/planner => ../planner

replace github.com/skein-mesh/skein/memoryd => ../memoryd

replace github.com/skein-mesh/skein/miner => ../miner
