//go:build linux

package memif

import (
	"sync"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// BenchmarkPingPong bounces a 64-byte packet between two links in one
// process: one round trip per iteration.
func BenchmarkPingPong(b *testing.B) {
	srv, cli := pair(b, Config{}, Config{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pkts := make([]link.Packet, 8)
		out := []link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrB}}
		for {
			n, err := srv.Recv(pkts)
			if err != nil {
				return
			}
			for range n {
				if srv.Send(out) != nil {
					return
				}
			}
		}
	}()
	pkts := make([]link.Packet, 8)
	out := []link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrA}}
	b.ResetTimer()
	for range b.N {
		if err := cli.Send(out); err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Recv(pkts); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	srv.Close()
	wg.Wait()
}

// BenchmarkThroughput streams 4 KiB-MTU packets (4124 bytes: chained
// over two 2 KiB buffers) from client to server in batches of 32.
func BenchmarkThroughput(b *testing.B) {
	const n = 4096 + 28
	srv, cli := pair(b, Config{}, Config{TxWait: 1 << 40})
	var wg sync.WaitGroup
	wg.Add(1)
	got := 0
	go func() {
		defer wg.Done()
		pkts := make([]link.Packet, 32)
		for {
			k, err := srv.Recv(pkts)
			if err != nil {
				return
			}
			got += k
		}
	}()
	batch := make([]link.Packet, 32)
	for i := range batch {
		batch[i] = link.Packet{Buf: mkPkt(n, byte(i)), N: n, Addr: addrA}
	}
	b.SetBytes(n * int64(len(batch)))
	b.ResetTimer()
	for range b.N {
		if err := cli.Send(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cli.Close()
	srv.Close()
	wg.Wait()
	b.ReportMetric(float64(got)/float64(b.N*len(batch)), "delivered/sent")
}
