package main

import (
	"errors"
	"expvar"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/netconn/metrics"
)

// debugPrefix starts the line a server prints once its debug endpoint
// listens.
const debugPrefix = "rsockbench server: debug on "

var publishOnce sync.Once

// publishSnapshot publishes netconn's snapshot through expvar under
// netconn.ExpvarName, once: netconn publishes nothing by itself.
func publishSnapshot() {
	publishOnce.Do(func() {
		expvar.Publish(netconn.ExpvarName, expvar.Func(func() any { return netconn.Snapshot() }))
	})
}

// serveDebug serves /debug/vars (expvar, with netconn's snapshot under
// "rsock") and /metrics (Prometheus' text format) on addr, on a mux of
// its own, and announces the address on w. The returned function stops it.
func serveDebug(addr string, w io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	publishSnapshot()
	mux := http.NewServeMux()
	mux.Handle("/debug/vars", expvar.Handler())
	mux.Handle("/metrics", metrics.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(w, "rsockbench: debug endpoint: %v\n", err)
		}
	}()
	fmt.Fprintf(w, "%s%s\n", debugPrefix, ln.Addr())
	return func() {
		srv.Close()
		<-done
	}, nil
}
