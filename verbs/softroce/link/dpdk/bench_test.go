//go:build dpdk

package dpdk

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/internal/netns"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// BenchmarkThroughput streams packets one way in sends of 32 between two
// links of this process and reports what arrived: packets/s and GB/s of
// RoCEv2 packets (UDP payload), and the share lost. Packets of 64 bytes
// measure the per-packet cost, the largest for the port's MTU (a RoCE
// MTU of 4096 or, on net_af_packet at MTU 1500, 1024) the byte rate.
//
//   - ring: a net_ring pair, the software ceiling;
//   - memif: a net_memif server and client port joined by a socket
//     (MTU 9000);
//   - af_packet: two net_af_packet ports on a veth pair between two
//     network namespaces (MTU 1500; root only).
func BenchmarkThroughput(b *testing.B) {
	for _, k := range []struct {
		name string
		open func(testing.TB) (*Link, *Link)
		max  int
	}{
		{"ring", func(tb testing.TB) (*Link, *Link) { return ringLinks(tb) }, 4096 + 28},
		{"memif", memifLinks, 4096 + 28},
		{"af_packet", afPacketLinks, 1024 + 28},
	} {
		b.Run(k.name, func(b *testing.B) {
			// One pair of links and receive loops for all the runs: DPDK
			// 22.11's net_memif does not survive closing and reopening a
			// pair of ports connected in one process.
			r := newRig(k.open(b))
			defer r.close()
			for _, size := range []int{64, k.max} {
				b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { r.stream(b, size) })
			}
		})
	}
}

// rig is two links with their receive loops running; it counts what
// rx receives (tx's loop takes the ARP answers).
type rig struct {
	tx, rx *Link
	got    atomic.Int64
	done   chan struct{}
}

func newRig(tx, rx *Link) *rig {
	r := &rig{tx: tx, rx: rx, done: make(chan struct{}, 2)}
	for _, l := range []*Link{tx, rx} {
		go func() {
			defer func() { r.done <- struct{}{} }()
			l.RecvLoop(make([]link.Packet, 64), func(p []link.Packet) {
				if l == rx {
					r.got.Add(int64(len(p)))
				}
			})
		}()
	}
	return r
}

func (r *rig) close() {
	r.tx.Close()
	r.rx.Close()
	<-r.done
	<-r.done
}

// stream sends b.N packets of size bytes from tx to rx and reports the
// rates of those received.
func (r *rig) stream(b *testing.B, size int) {
	tx, rx, got := r.tx, r.rx, &r.got
	// Warm up: resolve the neighbour, wake the receiver.
	warm := []link.Packet{{Buf: mkPkt(size, 0), N: size, Addr: rx.LocalAddr()}}
	for deadline, base := time.Now().Add(5*time.Second), got.Load(); got.Load() == base; {
		if err := tx.Send(warm); err != nil {
			b.Fatal(err)
		}
		if time.Now().After(deadline) {
			b.Fatalf("nothing arrives; stats %+v %+v", tx.Stats(), rx.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	out := make([]link.Packet, 32)
	for i := range out {
		out[i] = link.Packet{Buf: mkPkt(size, byte(i)), N: size, Addr: rx.LocalAddr()}
	}
	base := got.Load()
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; sent += len(out) {
		if err := tx.Send(out[:min(len(out), b.N-sent)]); err != nil {
			b.Fatal(err)
		}
	}
	// Wait for the last packets, until nothing more arrives for 20 ms.
	last, lastAt := got.Load(), time.Now()
	for got.Load()-base < int64(b.N) && time.Since(lastAt) < 20*time.Millisecond {
		time.Sleep(time.Millisecond)
		if n := got.Load(); n != last {
			last, lastAt = n, time.Now()
		}
	}
	elapsed := time.Since(start)
	if got.Load()-base < int64(b.N) {
		elapsed = lastAt.Sub(start)
	}
	b.StopTimer()
	n := got.Load() - base
	b.ReportMetric(float64(n)/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(n)*float64(size)/elapsed.Seconds()/1e9, "GB/s")
	b.ReportMetric(100*float64(int64(b.N)-n)/float64(b.N), "%lost")
}

var memifPorts atomic.Int32

// memifLinks opens a net_memif server port and a client port connected
// to it through a socket, at MTU 9000.
func memifLinks(tb testing.TB) (*Link, *Link) {
	n := memifPorts.Add(1)
	socket := filepath.Join(tb.TempDir(), "memif.sock")
	port := func(i int32, role string) string {
		return fmt.Sprintf("net_memif%d,role=%s,socket=%s,socket-abstract=no", i, role, socket)
	}
	a, err := Open(Config{Port: port(2*n, "server"), Local: netip.MustParsePrefix("192.0.2.1/24"), MTU: 9000})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := Open(Config{Port: port(2*n+1, "client"), Local: netip.MustParsePrefix("192.0.2.2/24"), MTU: 9000, LinkWait: 5 * time.Second})
	if err != nil {
		a.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close(); c.Close() })
	return a, c
}

// afPacketLinks opens a net_af_packet port in each namespace of a new
// lab, on its veth (MTU 1500); it skips where no lab can be made.
func afPacketLinks(tb testing.TB) (*Link, *Link) {
	if err := netlab.Check(); err != nil {
		tb.Skip(err)
	}
	lab, err := netlab.New(netlab.Config{MTU: 1500, Prefix: "rsdpdkb"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lab.Close() })
	n := memifPorts.Add(1)
	var links [2]*Link
	for i, ns := range []*netlab.Namespace{lab.A, lab.B} {
		var oerr error
		err := netns.Do(ns.Name, func() {
			links[i], oerr = Open(Config{Port: fmt.Sprintf("net_af_packet%d%d,iface=%s", n, i, ns.Dev),
				Local: netip.PrefixFrom(ns.IPv4, 24), LinkWait: 5 * time.Second})
		})
		if err = cmpErr(err, oerr); err != nil {
			if i == 1 {
				links[0].Close()
			}
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() { links[0].Close(); links[1].Close() })
	return links[0], links[1]
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
