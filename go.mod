module github.com/rsock-go/rsock

go 1.26.8

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)
