// Command http shows net/http running over rsock.
//
// The server is an ordinary http.Server whose listener comes from
// netconn.Listen instead of net.Listen. The client is an ordinary
// http.Client whose Transport dials with netconn.Dialer instead of
// net.Dialer. Nothing else changes: handlers, middleware and clients stay
// as they are.
//
//	ln, _ := netconn.Listen("tcp", ":8080")
//	http.Serve(ln, handler)
//
//	client := &http.Client{Transport: &http.Transport{
//		DialContext: (&netconn.Dialer{}).DialContext,
//	}}
//
// A Go client that dials with netconn gets its responses over RDMA (here
// soft-RoCE on UDP). Any other client, such as curl or a browser, reaches
// the same listener over plain TCP: the listener sees that the client did
// not start the rsock handshake and serves it as plain TCP.
//
// Usage:
//
//	go run ./examples/http                        # serve on loopback, fetch once, exit
//	go run ./examples/http -listen 127.0.0.1:8080 # serve until interrupted
//	go run ./examples/http -get http://127.0.0.1:8080/
//	curl http://127.0.0.1:8080/                   # served as plain TCP
//
// Paths served:
//
//	/         a greeting that names the transport the request came over
//	/bytes?n= n bytes of a fixed pattern (see patternAt), for large transfers
//
// Every response carries the header X-Rsock-Transport with the server's
// view of the connection ("rdma/softroce/udp" or "tcp"). With -get the
// client prints its own view too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/rsock-go/rsock/netconn"
)

// TransportHeader is the response header naming the server's transport.
const TransportHeader = "X-Rsock-Transport"

// maxBytes bounds /bytes?n= so that a client cannot ask for too much.
const maxBytes = 256 << 20

type connKey struct{}

// newServer returns an http.Server whose handlers can see the connection
// each request arrived on (see connOf).
func newServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		tr := transportOf(r)
		w.Header().Set(TransportHeader, tr)
		fmt.Fprintf(w, "hello over %s\n", tr)
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > maxBytes {
			http.Error(w, fmt.Sprintf("n must be an integer from 0 to %d", maxBytes), http.StatusBadRequest)
			return
		}
		w.Header().Set(TransportHeader, transportOf(r))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		io.Copy(w, io.LimitReader(&patternReader{}, int64(n)))
	})
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// ConnContext stashes the connection in every request's context.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// connOf returns the connection a request arrived on.
func connOf(r *http.Request) net.Conn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return c
}

// transportOf names the transport of the request's connection.
func transportOf(r *http.Request) string {
	if c, ok := connOf(r).(*netconn.Conn); ok {
		return c.Transport()
	}
	return "unknown"
}

// newClient returns an http.Client that dials with netconn. If onDial is
// not nil it is called with every new connection.
func newClient(onDial func(*netconn.Conn)) *http.Client {
	d := &netconn.Dialer{}
	d.Timeout = 10 * time.Second
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil && onDial != nil {
			onDial(c.(*netconn.Conn))
		}
		return c, err
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:       dial,
		ForceAttemptHTTP2: false, // HTTP/2 needs TLS here; HTTP/1.1 is the point
		MaxIdleConns:      16,
		IdleConnTimeout:   30 * time.Second,
	}}
}

// patternAt fills b with a fixed byte sequence starting at offset off and
// returns len(b). Byte i of the sequence is byte(i*7 + i>>8), so that a
// shifted, repeated or dropped block shows.
func patternAt(off int64, b []byte) int {
	for i := range b {
		j := off + int64(i)
		b[i] = byte(j*7 + j>>8)
	}
	return len(b)
}

// patternReader is an endless reader of the pattern from its start.
type patternReader struct{ off int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	n := patternAt(p.off, b)
	p.off += int64(n)
	return n, nil
}

// get fetches url with client and writes the body to out; it reports the
// server's and the client's view of the transport on info.
func get(ctx context.Context, client *http.Client, url string, out, info io.Writer) error {
	var local string
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		if c, ok := ci.Conn.(*netconn.Conn); ok {
			local = c.Transport()
			if r := c.FallbackReason(); r != "" {
				local += " (" + r + ")"
			}
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(out, resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(info, "%s: %s, %d bytes; client transport %s, server transport %s\n",
		url, resp.Status, n, local, resp.Header.Get(TransportHeader))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "http:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "serve on this address until interrupted (e.g. 127.0.0.1:8080)")
	getURL := fs.String("get", "", "fetch this URL with a netconn client, print the body and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	switch {
	case *listen != "" && *getURL != "":
		return errors.New("give -listen or -get, not both")
	case *getURL != "":
		client := newClient(nil)
		defer client.CloseIdleConnections()
		return get(ctx, client, *getURL, stdout, stderr)
	case *listen != "":
		ln, err := netconn.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "serving http://%s/ (rsock and plain TCP clients); ^C to stop\n", ln.Addr())
		return serve(ctx, newServer(), ln)
	}

	// No flags: a self-contained demo on loopback.
	ln, err := netconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := newServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	client := newClient(nil)
	err = get(ctx, client, "http://"+ln.Addr().String()+"/", stdout, stderr)
	client.CloseIdleConnections()
	srv.Close()
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// serve runs srv on ln until ctx is done, then shuts it down.
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	return err
}
