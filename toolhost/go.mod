module github.com/skein-mesh/skein/toolhost

go 1.26.8

require github.com/skein-mesh/skein/pkg v0.0.0

replace github.com/skein-mesh/skein/pkg => ../pkg
