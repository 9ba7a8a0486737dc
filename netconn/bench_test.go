package netconn

import (
	"context"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rsock-go/rsock/rsock"
)

// benchPair returns a connected pair over rsock ("rsock") or plain TCP
// ("tcp") on loopback.
func benchPair(b *testing.B, kind string) (net.Conn, net.Conn) {
	b.Helper()
	var ln net.Listener
	var err error
	if kind == "tcp" {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	} else {
		ln, err = Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	var c net.Conn
	if kind == "tcp" {
		c, err = net.Dial("tcp", ln.Addr().String())
	} else {
		c, err = (&Dialer{}).DialContext(context.Background(), "tcp", ln.Addr().String())
	}
	if err != nil {
		b.Fatal(err)
	}
	s := <-acc
	if s == nil {
		b.Fatal("accept failed")
	}
	if kind == "rsock" && transport(c) != loopbackTransport() {
		b.Fatalf("transport %q", transport(c))
	}
	b.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// BenchmarkStream measures one-way stream throughput with writes of each
// size, rsock against TCP in the same run.
func BenchmarkStream(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		for _, kind := range []string{"tcp", "rsock"} {
			b.Run(kind+"/"+sizeName(size), func(b *testing.B) {
				c, s := benchPair(b, kind)
				done := make(chan int64)
				go func() {
					n, _ := io.Copy(io.Discard, s)
					done <- n
				}()
				buf := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := c.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				c.(interface{ CloseWrite() error }).CloseWrite()
				if n := <-done; n != int64(size)*int64(b.N) {
					b.Fatalf("received %d bytes", n)
				}
			})
		}
	}
}

// BenchmarkPingPong measures 64-byte request/response round trips; the
// metrics are round-trip percentiles.
func BenchmarkPingPong(b *testing.B) {
	for _, kind := range []string{"tcp", "rsock"} {
		b.Run(kind, func(b *testing.B) {
			c, s := benchPair(b, kind)
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := io.ReadFull(s, buf); err != nil {
						return
					}
					if _, err := s.Write(buf); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, 64)
			rtts := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
				rtts = append(rtts, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(rtts)
			pct := func(p float64) float64 { return float64(rtts[int(p*float64(len(rtts)-1))].Nanoseconds()) / 1000 }
			b.ReportMetric(pct(0.5), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkConnMemory reports what one idle rsock connection pair costs at
// the default ring size: Go heap per connection (both ends counted once
// each) and registered (mmap) bytes per connection.
func BenchmarkConnMemory(b *testing.B) {
	const n = 50
	ln, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	// Open every device first, with connections kept for the run: a
	// device's packet buffers (about 5 MiB) are the process's, not a
	// connection's.
	for j := 0; j < maxDevices(); j++ {
		c, s := benchPairOn(b, ln)
		defer c.Close()
		defer s.Close()
	}
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		conns := make([]net.Conn, 0, 2*n)
		for j := 0; j < n; j++ {
			c, s := benchPairOn(b, ln)
			conns = append(conns, c, s)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(2*n), "heap-B/conn")
		b.ReportMetric(float64(registeredBytes(rsockDefaultRing())), "registered-B/conn")
		for _, c := range conns {
			c.Close()
		}
	}
}

func benchPairOn(b *testing.B, ln net.Listener) (net.Conn, net.Conn) {
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := <-acc
	if s == nil || transport(c) == "tcp" {
		b.Fatal("no RDMA connection")
	}
	return c, s
}

// registeredBytes is what rsock.NewEndpoint maps and registers for a ring
// size: the receive ring, the send ring, and the control slots.
func registeredBytes(ring int) int {
	return 2*ring + (rsock.DefaultRecvDepth+16)*24
}

func rsockDefaultRing() int { return rsock.DefaultRingSize }
