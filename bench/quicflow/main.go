// Command quicflow is one bulk QUIC flow (quic-go, with its own CUBIC and
// pacing over UDP) for scripts/bottleneck-bench.sh: the case tcp+quic
// puts a well-kept user-space UDP transport beside a TCP flow at the
// same bottleneck as tcp+rsock, on the same machine, so that rsock's
// share can be read against what such a transport gets there.
//
//	quicflow server -addr HOST:PORT
//	quicflow client -addr HOST:PORT -duration 20s -json FILE
//
// The server takes one connection and one stream, reads it to its end and
// closes the connection. The client writes 64 KiB at a time for the
// duration, closes its stream, and waits for the server to close: its
// goodput (bytes over the time until the server had them all) goes to
// stdout and, as {"conn_transport":"quic","gbps":GB/s}, to FILE.
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"time"

	"github.com/quic-go/quic-go"
)

// alpn names quicflow's protocol in the TLS handshake.
const alpn = "rsock-quicflow"

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "server" && os.Args[1] != "client") {
		fmt.Fprintln(os.Stderr, "usage: quicflow server -addr HOST:PORT | client -addr HOST:PORT [-duration D] [-json FILE]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "", "the server's UDP address")
	dur := fs.Duration("duration", 10*time.Second, "how long the client writes")
	js := fs.String("json", "", "a file for the client's result")
	fs.Parse(os.Args[2:])
	ctx := context.Background()
	if os.Args[1] == "server" {
		ln, err := listen(*addr)
		if err != nil {
			fail(err)
		}
		fmt.Printf("quicflow: listening on %s\n", ln.Addr())
		n, err := serveOne(ctx, ln)
		ln.Close()
		if err != nil {
			fail(err)
		}
		fmt.Printf("quicflow: received %d bytes\n", n)
		return
	}
	n, el, err := send(ctx, *addr, *dur)
	if err != nil {
		fail(err)
	}
	gbps := float64(n) / el.Seconds() / 1e9
	fmt.Printf("quicflow: %d bytes in %v, %.4f GB/s\n", n, el.Round(time.Millisecond), gbps)
	if *js != "" {
		b, _ := json.Marshal(map[string]any{"conn_transport": "quic", "gbps": gbps})
		if err := os.WriteFile(*js, b, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "quicflow:", err)
	os.Exit(1)
}

// config is both ends' QUIC configuration: quic-go's defaults (CUBIC,
// pacing, flow-control windows of up to 6 MiB a stream) with an idle timeout
// longer than any loss episode of the bench.
var config = &quic.Config{MaxIdleTimeout: 30 * time.Second}

// listen starts a QUIC listener on addr with a fresh self-signed key.
func listen(addr string) (*quic.Listener, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, pub, key)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{alpn}}
	return quic.ListenAddr(addr, tc, config)
}

// serveOne accepts one connection and its first stream, and returns how
// many bytes the stream carried to its end.
func serveOne(ctx context.Context, ln *quic.Listener) (int64, error) {
	c, err := ln.Accept(ctx)
	if err != nil {
		return 0, err
	}
	s, err := c.AcceptStream(ctx)
	if err != nil {
		c.CloseWithError(1, "")
		return 0, err
	}
	n, err := io.Copy(io.Discard, s)
	c.CloseWithError(0, "")
	return n, err
}

// send writes 64 KiB at a time to a new stream at addr for dur, then
// waits for the server's close, which follows its read of the last byte.
// It returns the bytes written and the time until that close.
func send(ctx context.Context, addr string, dur time.Duration) (int64, time.Duration, error) {
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}} // a bench peer in the test's own namespace
	c, err := quic.DialAddr(ctx, addr, tc, config)
	if err != nil {
		return 0, 0, err
	}
	defer c.CloseWithError(0, "")
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 64<<10)
	start := time.Now()
	var n int64
	for time.Since(start) < dur {
		m, err := s.Write(buf)
		n += int64(m)
		if err != nil {
			return n, 0, err
		}
	}
	if err := s.Close(); err != nil {
		return n, 0, err
	}
	select {
	case <-c.Context().Done():
	case <-time.After(30 * time.Second):
		return n, 0, errors.New("the server did not close after the stream's end")
	}
	var appErr *quic.ApplicationError
	if err := context.Cause(c.Context()); !errors.As(err, &appErr) || appErr.ErrorCode != 0 {
		return n, 0, fmt.Errorf("the connection ended with %v, not the server's close", err)
	}
	return n, time.Since(start), nil
}
