//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var loop4 = netip.MustParseAddrPort("127.0.0.1:0")

func listen(t testing.TB, cfg Config) *Link {
	t.Helper()
	l, err := Listen(cfg)
	if err != nil {
		t.Fatalf("Listen(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func pair(t testing.TB, addr netip.AddrPort) (a, b *Link) {
	return listen(t, Config{Addr: addr}), listen(t, Config{Addr: addr})
}

// bufs returns n packets with buffers of size bytes.
func bufs(n, size int) []link.Packet {
	p := make([]link.Packet, n)
	for i := range p {
		p[i].Buf = make([]byte, size)
	}
	return p
}

// fill makes p an n-byte packet to dst with pseudo-random content.
func fill(p *link.Packet, n int, dst netip.AddrPort, r *rand.Rand) {
	p.N = n
	p.Addr = dst
	for i := range p.Buf[:n] {
		p.Buf[i] = byte(r.Uint32())
	}
}

// recvN receives exactly n packets (or fails after a timeout), copying
// them out.
func recvN(t testing.TB, l *Link, n, bufSize int) []link.Packet {
	t.Helper()
	var out []link.Packet
	rx := bufs(64, bufSize)
	done := make(chan error, 1)
	go func() {
		for len(out) < n {
			k, err := l.Recv(rx[:min(len(rx), n-len(out))])
			if err != nil {
				done <- err
				return
			}
			for _, p := range rx[:k] {
				q := p
				q.Buf = bytes.Clone(p.Buf[:p.N])
				out = append(out, q)
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
	case <-time.After(10 * time.Second):
		l.Close()
		<-done
		t.Fatalf("timed out with %d of %d packets", len(out), n)
	}
	return out
}

func TestExchangeSizes(t *testing.T) {
	a, b := pair(t, loop4)
	if a.Name() != "udp" {
		t.Errorf("Name = %q", a.Name())
	}
	r := rand.New(rand.NewPCG(1, 2))
	const maxN = 4096 + 60
	tx := bufs(64, maxN+wire.ICRCLen)
	for start := 12; start <= maxN; start += len(tx) {
		k := min(len(tx), maxN+1-start)
		for i := range k {
			fill(&tx[i], start+i, b.LocalAddr(), r)
		}
		if err := a.Send(tx[:k]); err != nil {
			t.Fatal(err)
		}
		got := recvN(t, b, k, maxN+wire.ICRCLen)
		for i, p := range got {
			want := tx[i].Buf[:tx[i].N]
			if !bytes.Equal(p.Buf, want) {
				t.Fatalf("size %d: bytes differ", tx[i].N)
			}
			if p.ICRC != link.ICRCGood {
				t.Fatalf("size %d: ICRC %v, want good", tx[i].N, p.ICRC)
			}
			if p.Addr != a.LocalAddr() {
				t.Fatalf("size %d: from %v, want %v", tx[i].N, p.Addr, a.LocalAddr())
			}
		}
		// The sender's buffer now holds the ICRC after the packet.
		p := &tx[0]
		ph := wire.PseudoHeader{Src: a.LocalAddr(), Dst: b.LocalAddr()}
		if got, want := wire.ICRCOf(p.Buf[p.N:]), wire.ComputeICRC(&ph, p.Buf[:p.N]); got != want {
			t.Fatalf("ICRC in send buffer %08x, want %08x", got, want)
		}
	}
}

func TestBatch64(t *testing.T) {
	a, b := pair(t, loop4)
	r := rand.New(rand.NewPCG(3, 4))
	tx := bufs(64, 4096+64)
	for i := range tx {
		fill(&tx[i], 4096+28, b.LocalAddr(), r)
		tx[i].Buf[0] = byte(i)
	}
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, b, 64, 4096+64)
	for i, p := range got {
		if !bytes.Equal(p.Buf, tx[i].Buf[:tx[i].N]) || p.ICRC != link.ICRCGood {
			t.Fatalf("packet %d differs or ICRC %v", i, p.ICRC)
		}
	}
}

// TestSendLargerThanBatch sends more packets than Config.Batch in one call.
func TestSendLargerThanBatch(t *testing.T) {
	a := listen(t, Config{Addr: loop4, Batch: 7})
	b := listen(t, Config{Addr: loop4, Batch: 5})
	r := rand.New(rand.NewPCG(5, 6))
	tx := bufs(50, 300)
	for i := range tx {
		fill(&tx[i], 100+i, b.LocalAddr(), r)
	}
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, b, len(tx), 300)
	for i, p := range got {
		if !bytes.Equal(p.Buf, tx[i].Buf[:tx[i].N]) {
			t.Fatalf("packet %d differs", i)
		}
	}
}

// ownLoop4 is a loopback address that only TestPortZero uses.
var ownLoop4 = netip.MustParseAddrPort("127.0.47.91:0")

func portFree(ip string, port int) bool {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestPortZero(t *testing.T) {
	t.Run("free", func(t *testing.T) {
		// An address of 127/8 that no other test uses (test packages run
		// in parallel, and the others take 4791 on 127.0.0.1-5): its
		// 4791 is free unless another program holds it.
		l, err := Listen(Config{Addr: ownLoop4})
		if err != nil {
			t.Fatal(err)
		}
		port := l.LocalAddr().Port()
		l.Close()
		if port != link.RoCEv2Port {
			t.Fatalf("bound port %d, want %d (another program holding %v:%d would explain it: free %v)",
				port, link.RoCEv2Port, ownLoop4.Addr(), link.RoCEv2Port, portFree(ownLoop4.Addr().String(), link.RoCEv2Port))
		}
	})
	t.Run("taken", func(t *testing.T) {
		hold, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: link.RoCEv2Port})
		if err != nil {
			t.Logf("127.0.0.1:%d already held elsewhere: %v", link.RoCEv2Port, err)
		} else {
			defer hold.Close()
		}
		l := listen(t, Config{Addr: loop4})
		if p := l.LocalAddr().Port(); p == link.RoCEv2Port || p == 0 {
			t.Fatalf("bound port %d, want an ephemeral port", p)
		}
		if got := l.LocalAddr().Addr(); got != loop4.Addr() {
			t.Fatalf("LocalAddr IP %v", got)
		}
		// An explicit port that is taken is an error.
		if _, err := Listen(Config{Addr: l.LocalAddr()}); err == nil {
			t.Fatal("Listen on a taken explicit port succeeded")
		}
	})
	t.Run("explicit", func(t *testing.T) {
		l := listen(t, Config{Addr: loop4})
		port := l.LocalAddr().Port()
		l.Close()
		l2 := listen(t, Config{Addr: netip.AddrPortFrom(loop4.Addr(), port)})
		if l2.LocalAddr().Port() != port {
			t.Fatalf("port %d, want %d", l2.LocalAddr().Port(), port)
		}
	})
}

func TestUnspecifiedRejected(t *testing.T) {
	for _, a := range []netip.AddrPort{
		{},
		netip.MustParseAddrPort("0.0.0.0:0"),
		netip.MustParseAddrPort("0.0.0.0:4791"),
		netip.MustParseAddrPort("[::]:0"),
		netip.MustParseAddrPort("[::ffff:0.0.0.0]:0"),
	} {
		if l, err := Listen(Config{Addr: a}); err == nil {
			l.Close()
			t.Errorf("Listen(%v) succeeded", a)
		}
	}
	if l, err := Listen(Config{Addr: loop4, Batch: -1}); err == nil {
		l.Close()
		t.Error("negative Batch accepted")
	}
}

// TestMappedAddr checks that an IPv4-mapped IPv6 address binds IPv4.
func TestMappedAddr(t *testing.T) {
	l := listen(t, Config{Addr: netip.MustParseAddrPort("[::ffff:127.0.0.1]:0")})
	if !l.LocalAddr().Addr().Is4() {
		t.Fatalf("LocalAddr %v not IPv4", l.LocalAddr())
	}
}

// rawSend sends b as one datagram from a plain UDP socket and returns the
// socket's address.
func rawSend(t *testing.T, to netip.AddrPort, dgrams ...[]byte) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(loop4))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, b := range dgrams {
		if _, err := c.WriteToUDPAddrPort(b, to); err != nil {
			t.Fatal(err)
		}
	}
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func TestCorruptICRC(t *testing.T) {
	for _, strict := range []bool{false, true} {
		l := listen(t, Config{Addr: loop4, StrictICRC: strict})
		dgram := make([]byte, 200)
		for i := range dgram {
			dgram[i] = byte(i * 7)
		}
		short := make([]byte, minPacket-1)
		from := rawSend(t, l.LocalAddr(), short, dgram)
		rx := bufs(4, 512)
		n, err := l.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("Recv returned %d packets, want 1 (the short datagram skipped)", n)
		}
		// No IPv4 ID explains the datagram's last four bytes as its ICRC:
		// bad, strict or not.
		want := link.ICRCBad
		p := rx[0]
		if p.ICRC != want || p.N != len(dgram)-4 || !bytes.Equal(p.Bytes(), dgram[:len(dgram)-4]) || p.Addr != from {
			t.Fatalf("strict=%v: got ICRC %v N %d from %v, want %v N %d from %v",
				strict, p.ICRC, p.N, p.Addr, want, len(dgram)-4, from)
		}
	}
}

// TestTruncatedDropped checks that without GRO a datagram larger than the
// buffer is dropped rather than returned cut short, and that Buf slices are
// permuted so that returned packets come first. With GRO the packets are
// returned as views of the link's scratch, so the callers' buffer size does
// not matter and all three arrive.
func TestTruncatedDropped(t *testing.T) {
	for _, gro := range []bool{false, true} {
		a := listen(t, Config{Addr: loop4})
		b := listenOffloads(t, loop4, false, gro)
		tx := bufs(3, 2000)
		r := rand.New(rand.NewPCG(7, 8))
		fill(&tx[0], 1500, b.LocalAddr(), r)
		fill(&tx[1], 100, b.LocalAddr(), r)
		fill(&tx[2], 50, b.LocalAddr(), r)
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		want := tx[1:]
		if gro {
			want = tx
		}
		// Copy each call's packets out: with GRO, the next Recv may
		// overwrite them.
		var got [][]byte
		rx := bufs(3, 1000)
		for len(got) < len(want) {
			n, err := b.Recv(rx[len(got):])
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rx[len(got) : len(got)+n] {
				got = append(got, bytes.Clone(p.Bytes()))
			}
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i].Bytes()) {
				t.Fatalf("gro %v: packet %d differs", gro, i)
			}
		}
		if d, wantD := b.Dropped(), uint64(len(tx)-len(want)); d != wantD {
			t.Errorf("gro %v: Dropped() = %d, want %d", gro, d, wantD)
		}
	}
}

// TestRuntsDropped: datagrams shorter than a BTH and an ICRC are dropped
// and counted, with and without GRO.
func TestRuntsDropped(t *testing.T) {
	for _, gro := range []bool{false, true} {
		b := listenOffloads(t, loop4, false, gro)
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(b.LocalAddr()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for n := range 16 {
			if _, err := c.Write(make([]byte, n)); err != nil {
				t.Fatal(err)
			}
		}
		good := make([]byte, 40)
		good[0] = byte(wire.RCSendOnly)
		if _, err := c.Write(good); err != nil {
			t.Fatal(err)
		}
		rx := bufs(4, 1000)
		if n, err := b.Recv(rx); err != nil || n != 1 || rx[0].N != len(good)-wire.ICRCLen {
			t.Fatalf("gro %v: Recv = %d packets (first %d bytes), %v; want the 40-byte datagram", gro, n, rx[0].N, err)
		}
		if d := b.Dropped(); d != 16 {
			t.Errorf("gro %v: Dropped() = %d, want 16", gro, d)
		}
	}
}

func TestSendErrors(t *testing.T) {
	a, b := pair(t, loop4)
	tx := bufs(4, 100)
	r := rand.New(rand.NewPCG(9, 10))
	fill(&tx[0], 40, netip.MustParseAddrPort("[::1]:4791"), r) // wrong family
	fill(&tx[1], 40, b.LocalAddr(), r)
	fill(&tx[2], 40, b.LocalAddr(), r)
	tx[2].Buf = tx[2].Buf[:38:38] // no room for the ICRC
	fill(&tx[3], 41, b.LocalAddr(), r)
	if err := a.Send(tx); err == nil {
		t.Fatal("Send succeeded")
	}
	got := recvN(t, b, 2, 100)
	if !bytes.Equal(got[0].Buf, tx[1].Bytes()) || !bytes.Equal(got[1].Buf, tx[3].Bytes()) {
		t.Fatal("valid packets around invalid ones were not sent")
	}
}

func TestClose(t *testing.T) {
	a := listen(t, Config{Addr: loop4})
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := a.Recv(bufs(4, 100))
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-errc:
			if !errors.Is(err, link.ErrClosed) {
				t.Fatalf("Recv after Close: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock Recv")
		}
	}
	a.Close() // idempotent
	tx := bufs(1, 100)
	tx[0].N, tx[0].Addr = 20, loop4
	if err := a.Send(tx); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if _, err := a.Recv(tx); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
}

func TestIPv6(t *testing.T) {
	addr := netip.MustParseAddrPort("[::1]:0")
	l, err := Listen(Config{Addr: addr})
	if err != nil {
		t.Skipf("::1 unavailable: %v", err)
	}
	defer l.Close()
	b := listen(t, Config{Addr: addr})
	r := rand.New(rand.NewPCG(11, 12))
	tx := bufs(3, 4200)
	for i, n := range []int{12, 1000, 4096 + 60} {
		fill(&tx[i], n, b.LocalAddr(), r)
	}
	if err := l.Send(tx); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, b, 3, 4200)
	for i, p := range got {
		if !bytes.Equal(p.Buf, tx[i].Bytes()) || p.ICRC != link.ICRCGood || p.Addr != l.LocalAddr() {
			t.Fatalf("packet %d: ICRC %v from %v", i, p.ICRC, p.Addr)
		}
	}
	// IPv4 destinations are refused by an IPv6 link.
	fill(&tx[0], 20, netip.MustParseAddrPort("127.0.0.1:4791"), r)
	if err := l.Send(tx[:1]); err == nil {
		t.Fatal("IPv6 link sent to an IPv4 address")
	}
}

// TestConcurrentSend sends from several goroutines at once: every packet
// arrives intact, and each sender's packets arrive in its order.
func TestConcurrentSend(t *testing.T) {
	a, b := pair(t, loop4)
	const senders, per = 4, 200
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 0))
			tx := bufs(10, 4200)
			seq := 0
			for range per / len(tx) {
				for i := range tx {
					n := 500
					if i%3 != 0 {
						n = 4096 + 28 // runs of full-size packets go out with GSO
					}
					fill(&tx[i], n, b.LocalAddr(), r)
					tx[i].Buf[0] = byte(s)
					binary.BigEndian.PutUint16(tx[i].Buf[1:], uint16(seq))
					seq++
				}
				if err := a.Send(tx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	got := recvN(t, b, senders*per, 4200)
	wg.Wait()
	next := make([]int, senders)
	for _, p := range got {
		if p.ICRC != link.ICRCGood || (p.N != 500 && p.N != 4096+28) {
			t.Fatalf("ICRC %v N %d", p.ICRC, p.N)
		}
		s, seq := int(p.Buf[0]), int(binary.BigEndian.Uint16(p.Buf[1:]))
		if s >= senders || seq != next[s] {
			t.Fatalf("sender %d: packet %d arrived, want %d", s, seq, next[s])
		}
		next[s]++
	}
}

func TestZeroAlloc(t *testing.T) {
	a, b := pair(t, loop4)
	r := rand.New(rand.NewPCG(13, 14))
	tx := bufs(64, 4200)
	for i := range tx {
		fill(&tx[i], 4096+28, b.LocalAddr(), r)
	}
	rx := bufs(64, 4200)
	var failed atomic.Bool
	round := func() {
		if err := a.Send(tx); err != nil {
			failed.Store(true)
			return
		}
		for got := 0; got < len(tx); {
			n, err := b.Recv(rx)
			if err != nil {
				failed.Store(true)
				return
			}
			got += n
		}
	}
	round() // warm up
	allocs := testing.AllocsPerRun(50, round)
	if failed.Load() {
		t.Fatal("send or receive failed")
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per round of Send(64)+Recv, want 0", allocs)
	}
}

func TestBufferSizes(t *testing.T) {
	l := listen(t, Config{Addr: loop4, RecvBuffer: 1 << 20, SendBuffer: 1 << 20})
	rb, sb, err := l.BufferSizes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SO_RCVBUF %d SO_SNDBUF %d", rb, sb)
	if rb < 1<<20 || sb < 1<<20 {
		t.Fatalf("buffers %d/%d smaller than requested", rb, sb)
	}
}

// BenchmarkUDPLinkThroughput sends batches of 64 packets of 4096 bytes from
// one goroutine and receives them in another, over 127.0.0.1, with plain
// sendmmsg/recvmmsg ("mmsg"), with GSO on send and GRO on receive
// ("gso-gro"), and with either alone. The sender keeps at most a window of
// packets in flight so the receive buffer does not overflow; packets lost
// anyway are reported as lost/op. rx-cpu-ns/op is the CPU time of the
// receiving thread per packet.
func BenchmarkUDPLinkThroughput(b *testing.B) {
	for _, c := range []struct {
		name     string
		gso, gro bool
	}{
		{"mmsg", false, false},
		{"gso-gro", true, true},
		{"gso", true, false},
		{"gro", false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchThroughput(b, Config{Addr: loop4, DisableGSO: !c.gso}, Config{Addr: loop4, DisableGRO: !c.gro})
		})
	}
}

// threadCPU returns the CPU time of the calling thread in nanoseconds.
func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

func benchThroughput(b *testing.B, txCfg, rxCfg Config) {
	const batch, size, window = 64, 4096, 4096
	tx, err := Listen(txCfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rxl, err := Listen(rxCfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rxl.Close()
	if gso, _ := tx.Offloads(); gso == txCfg.DisableGSO {
		b.Skipf("GSO not available")
	}
	if _, gro := rxl.Offloads(); gro == rxCfg.DisableGRO {
		b.Skipf("GRO not available")
	}
	pkts := bufs(batch, size+wire.ICRCLen)
	for i := range pkts {
		pkts[i].N, pkts[i].Addr = size, rxl.LocalAddr()
	}
	var received, bad, rxCPU atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The receiver runs on its own thread, whose CPU time is the
		// receive cost (rx-cpu-ns/op), independent of other load.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start := threadCPU()
		defer func() { rxCPU.Store(threadCPU() - start) }()
		rx := bufs(batch, size+wire.ICRCLen)
		for {
			n, err := rxl.Recv(rx)
			if err != nil {
				return
			}
			for _, p := range rx[:n] {
				if p.ICRC != link.ICRCGood {
					bad.Add(1)
				}
			}
			received.Add(int64(n))
		}
	}()
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N {
		k := min(batch, b.N-sent)
		for int64(sent)-received.Load() > window {
			time.Sleep(10 * time.Microsecond)
		}
		if err := tx.Send(pkts[:k]); err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	// Wait for the tail, tolerating loss.
	for last, idle := received.Load(), 0; last < int64(sent) && idle < 100; idle++ {
		time.Sleep(time.Millisecond)
		if now := received.Load(); now != last {
			last, idle = now, 0
		}
	}
	b.StopTimer()
	rxl.Close()
	<-done
	b.ReportMetric(float64(int64(sent)-received.Load())/float64(b.N), "lost/op")
	b.ReportMetric(float64(rxCPU.Load())/float64(b.N), "rx-cpu-ns/op")
	if bad.Load() != 0 {
		b.Fatalf("%d packets without a good ICRC", bad.Load())
	}
}

// TestWireIPv4ID captures the datagrams on a raw IP socket (root only) and
// checks that they carry don't-fragment and IPv4 ID 0, which the ICRC
// computed by Send assumes.
func TestWireIPv4ID(t *testing.T) {
	c, err := net.ListenIP("ip4:udp", &net.IPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skipf("no raw IP socket (needs CAP_NET_RAW): %v", err)
	}
	defer c.Close()
	raw, err := ipv4.NewRawConn(c)
	if err != nil {
		t.Fatal(err)
	}
	a, b := pair(t, loop4)
	r := rand.New(rand.NewPCG(15, 16))
	tx := bufs(8, 2100)
	for i := range tx {
		fill(&tx[i], 1000+100*i, b.LocalAddr(), r)
	}
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	recvN(t, b, len(tx), 2100)
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65536)
	for seen := 0; seen < len(tx); {
		h, p, _, err := raw.ReadFrom(buf)
		if err != nil {
			t.Fatalf("raw read after %d packets: %v", seen, err)
		}
		if len(p) < 8 || int(p[2])<<8|int(p[3]) != int(b.LocalAddr().Port()) ||
			int(p[0])<<8|int(p[1]) != int(a.LocalAddr().Port()) {
			continue // someone else's datagram
		}
		if h.ID != 0 || h.Flags&ipv4.DontFragment == 0 {
			t.Fatalf("IPv4 ID %d flags %v, want ID 0 with DF", h.ID, h.Flags)
		}
		pkt := p[8 : len(p)-wire.ICRCLen]
		ph := wire.PseudoHeader{Src: a.LocalAddr(), Dst: b.LocalAddr(), IPID: uint16(h.ID)}
		if wire.ComputeICRC(&ph, pkt) != wire.ICRCOf(p[len(p)-wire.ICRCLen:]) {
			t.Fatal("ICRC on the wire does not match")
		}
		seen++
	}
}
