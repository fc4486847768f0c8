module github.com/skein-mesh/skein/cli

go 1.26.8

require github.com/skein-mesh/skein/pkg v0.0.0

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/chromedp/chromedp v0.23.0
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/skein-mesh/skein/executor v0.0.0
	github.com/skein-mesh/skein/gateway v0.0.0
	github.com/skein-mesh/skein/memoryd v0.0.0
	github.com/skein-mesh/skein/miner v0.0.0
	github.com/skein-mesh/skein/planner v0.0.0
	github.com/skein-mesh/skein/toolhost v0.0.0
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
)

replace github.com/skein-mesh/skein/pkg => ../pkg

replace github.com/skein-mesh/skein/executor => ../executor

replace github.com/skein-mesh/skein/gateway => ../gateway

replace github.com/skein-mesh/skein/planner => ../planner

replace github.com/skein-mesh/skein/toolhost => ../toolhost

replace github.com/skein-mesh/skein/memoryd => ../memoryd

replace github.com/skein-mesh/skein/miner => ../miner
