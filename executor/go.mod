module github.com/skein-mesh/skein/executor

go 1.26.8

require github.com/skein-mesh/skein/pkg v0.0.0

replace github.com/skein-mesh/skein/pkg => ../pkg

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	// Tests serve their tools through a real toolhost.
	github.com/skein-mesh/skein/toolhost v0.0.0
)

replace github.com/skein-mesh/skein/toolhost => ../toolhost
