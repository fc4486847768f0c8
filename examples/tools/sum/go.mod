module github.com/skein-mesh/skein/examples/tools/sum

go 1.26.8
