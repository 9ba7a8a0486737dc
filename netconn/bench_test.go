package netconn

import (
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"
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
	if kind == "rsock" && transport(c) != "rdma/softroce/udp" {
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
