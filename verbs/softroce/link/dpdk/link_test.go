//go:build dpdk

package dpdk

import (
	"bytes"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

var pairs atomic.Int32

// ringPair opens two links joined by net_ring, at 192.0.2.1 and .2.
func ringLinks(t testing.TB) (*Link, *Link) {
	t.Helper()
	n := pairs.Add(1)
	a, b, err := OpenRingPair(nameOf("ra", n), nameOf("rb", n),
		Config{Local: netip.MustParsePrefix("192.0.2.1/24"), MTU: 9000},
		Config{Local: netip.MustParsePrefix("192.0.2.2/24"), MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func nameOf(p string, n int32) string { return p + string(rune('0'+n/10)) + string(rune('0'+n%10)) }

func mkPkt(n int, seed byte) []byte {
	b := make([]byte, n, n+wire.ICRCLen)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

// receive runs l's receive loop until the test ends, passing copies of
// the packets to the returned channel; the receiver also answers ARP.
func receive(t *testing.T, l *Link) <-chan link.Packet {
	ch := make(chan link.Packet, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.RecvLoop(make([]link.Packet, 64), func(pkts []link.Packet) {
			for _, p := range pkts {
				p.Buf = bytes.Clone(p.Bytes())
				ch <- p
			}
		})
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return ch
}

// TestRingPair sends bursts both ways, resolving each other with ARP, and
// checks every packet arrives whole with a good ICRC.
func TestRingPair(t *testing.T) {
	a, b := ringLinks(t)
	if a.Driver() != "net_ring" || a.Name() != "dpdk" || a.LocalAddr() != netip.MustParseAddrPort("192.0.2.1:4791") {
		t.Fatalf("driver %q name %q addr %v", a.Driver(), a.Name(), a.LocalAddr())
	}
	rx := map[*Link]<-chan link.Packet{a: receive(t, a), b: receive(t, b)}
	for _, dir := range [][2]*Link{{a, b}, {b, a}} {
		from, to := dir[0], dir[1]
		var out []link.Packet
		for i := range 100 {
			out = append(out, link.Packet{Buf: mkPkt(12+i*80, byte(i)), N: 12 + i*80, Addr: to.LocalAddr()})
		}
		if err := from.Send(out); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			select {
			case p := <-rx[to]:
				if p.ICRC != link.ICRCGood || p.Addr != from.LocalAddr() || !bytes.Equal(p.Bytes(), mkPkt(12+i*80, byte(i))) {
					t.Fatalf("packet %d: %v from %v, %d bytes", i, p.ICRC, p.Addr, p.N)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("received %d of 100; stats %+v %+v", i, from.Stats(), to.Stats())
			}
		}
	}
	if s := a.Stats(); s.ARPOut == 0 || s.ARPIn == 0 || s.TxDropped+s.Unresolved != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestUnreachable drops packets to an address outside the prefix without
// a gateway, and to a neighbour that does not answer.
func TestUnreachable(t *testing.T) {
	a, _ := ringLinks(t)
	start := time.Now()
	err := a.Send([]link.Packet{{Buf: mkPkt(20, 0), N: 20, Addr: netip.MustParseAddrPort("198.51.100.1:4791")},
		{Buf: mkPkt(20, 0), N: 20, Addr: netip.MustParseAddrPort("192.0.2.99:4791")}})
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Unresolved != 2 || s.Sent != 0 {
		t.Fatalf("stats %+v", s)
	}
	if d := time.Since(start); d < resolveTimeout {
		t.Fatalf("gave up on ARP after %v", d)
	}
}

// TestClose unblocks a receiver and makes Send and Recv fail.
func TestClose(t *testing.T) {
	a, _ := ringLinks(t)
	done := make(chan error)
	go func() {
		done <- a.RecvLoop(make([]link.Packet, 8), func([]link.Packet) {})
	}()
	time.Sleep(20 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("RecvLoop: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RecvLoop did not return after Close")
	}
	if err := a.Send([]link.Packet{{Buf: mkPkt(20, 0), N: 20, Addr: netip.MustParseAddrPort("192.0.2.2:4791")}}); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if _, err := a.Recv(make([]link.Packet, 1)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
