package pipe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

// setup returns a network with faults f and two endpoints, closed at the
// end of the test.
func setup(t testing.TB, f Faults) (*Network, *Endpoint, *Endpoint) {
	t.Helper()
	n := NewNetwork(f)
	t.Cleanup(func() { n.Close() })
	a, err := n.Endpoint(addrA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Endpoint(addrB)
	if err != nil {
		t.Fatal(err)
	}
	return n, a, b
}

func bufs(n, size int) []link.Packet {
	p := make([]link.Packet, n)
	for i := range p {
		p[i].Buf = make([]byte, size)
	}
	return p
}

// numbered makes p an n-byte packet to dst carrying seq in bytes 12..15
// and a pattern after that.
func numbered(p *link.Packet, seq uint32, n int, dst netip.AddrPort) {
	p.N, p.Addr = n, dst
	for i := range p.Buf[:n] {
		p.Buf[i] = byte(i*31 + int(seq))
	}
	binary.BigEndian.PutUint32(p.Buf[12:], seq)
}

// sendSeq sends count packets numbered from 0 from a to b, one per Send.
func sendSeq(t testing.TB, a *Endpoint, to netip.AddrPort, count, size int) {
	t.Helper()
	tx := bufs(1, size+wire.ICRCLen)
	for i := range count {
		numbered(&tx[0], uint32(i), size, to)
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
	}
}

// sendPaced is sendSeq keeping at most QueueLen/4 packets queued or in
// flight on n, so that a slow receiver does not overflow the queue.
func sendPaced(t testing.TB, n *Network, a *Endpoint, to netip.AddrPort, count, size int) {
	t.Helper()
	tx := bufs(1, size+wire.ICRCLen)
	for i := range count {
		for {
			s := n.Stats()
			if s.Sent+s.Duplicated-s.Delivered-s.Lost < QueueLen/4 {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		numbered(&tx[0], uint32(i), size, to)
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
	}
}

// receiver collects copies of the packets an endpoint receives.
type receiver struct {
	e    *Endpoint
	mu   sync.Mutex
	out  []link.Packet
	err  error
	done chan struct{}
}

// startDrain receives from e in a goroutine until e is closed.
func startDrain(e *Endpoint) *receiver {
	r := &receiver{e: e, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		rx := bufs(64, 8192)
		for {
			n, err := e.Recv(rx)
			if err != nil {
				if !errors.Is(err, link.ErrClosed) {
					r.mu.Lock()
					r.err = err
					r.mu.Unlock()
				}
				return
			}
			r.mu.Lock()
			for _, p := range rx[:n] {
				q := p
				q.Buf = bytes.Clone(p.Buf[:p.N])
				r.out = append(r.out, q)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// wait waits until no packet arrives for idle, closes the endpoint and
// returns the packets received.
func (r *receiver) wait(t testing.TB, idle time.Duration) []link.Packet {
	t.Helper()
	last := -1
	for {
		time.Sleep(idle)
		r.mu.Lock()
		cur := len(r.out)
		r.mu.Unlock()
		if cur == last {
			break
		}
		last = cur
	}
	r.e.Close()
	<-r.done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.out
}

func seqOf(p link.Packet) uint32 { return binary.BigEndian.Uint32(p.Buf[12:]) }

func TestInOrder(t *testing.T) {
	n, a, b := setup(t, Faults{})
	if a.Name() != "pipe" || a.LocalAddr() != addrA {
		t.Fatalf("Name %q LocalAddr %v", a.Name(), a.LocalAddr())
	}
	const count = 1000
	tx := bufs(10, 4096+64)
	for s := 0; s < count; s += len(tx) {
		for i := range tx {
			numbered(&tx[i], uint32(s+i), 16+(s+i)%4081, addrB)
		}
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
	}
	rx := bufs(7, 4096+64)
	for got := 0; got < count; {
		k, err := b.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rx[:k] {
			if seqOf(p) != uint32(got) || p.N != 16+got%4081 || p.ICRC != link.ICRCGood || p.Addr != addrA {
				t.Fatalf("packet %d: seq %d N %d ICRC %v from %v", got, seqOf(p), p.N, p.ICRC, p.Addr)
			}
			var want link.Packet
			want.Buf = make([]byte, p.N)
			numbered(&want, uint32(got), p.N, addrB)
			if !bytes.Equal(p.Bytes(), want.Bytes()) {
				t.Fatalf("packet %d: bytes differ", got)
			}
			ph := wire.PseudoHeader{Src: addrA, Dst: addrB}
			if wire.ICRCOf(p.Buf[p.N:]) != wire.ComputeICRC(&ph, p.Bytes()) {
				t.Fatalf("packet %d: ICRC in buffer is not the udp link's", got)
			}
			got++
		}
	}
	if s := n.Stats(); s != (Stats{Sent: count, Delivered: count}) {
		t.Fatalf("stats %+v", s)
	}
}

func near(t *testing.T, what string, got uint64, p float64, total int) {
	t.Helper()
	want := p * float64(total)
	tol := 5*math.Sqrt(want*(1-p)) + 1 // five standard deviations
	if math.Abs(float64(got)-want) > tol {
		t.Errorf("%s = %d, want %.0f ± %.0f", what, got, want, tol)
	} else {
		t.Logf("%s = %d (expected %.0f)", what, got, want)
	}
}

const faultN = 10000

func TestLoss(t *testing.T) {
	n, a, b := setup(t, Faults{Loss: 0.1, Seed: 7})
	rx := startDrain(b)
	sendPaced(t, n, a, addrB, faultN, 64)
	got := rx.wait(t, 20*time.Millisecond)
	s := n.Stats()
	near(t, "Lost", s.Lost, 0.1, faultN)
	if s.Sent != faultN || s.Delivered+s.Lost != faultN || uint64(len(got)) != s.Delivered {
		t.Fatalf("stats %+v, received %d", s, len(got))
	}
	for i := 1; i < len(got); i++ {
		if seqOf(got[i]) <= seqOf(got[i-1]) {
			t.Fatal("loss reordered packets")
		}
	}
	// The same seed gives the same losses.
	n2, a2, b2 := setup(t, Faults{Loss: 0.1, Seed: 7})
	rx2 := startDrain(b2)
	sendPaced(t, n2, a2, addrB, faultN, 64)
	got2 := rx2.wait(t, 20*time.Millisecond)
	if n2.Stats() != s || len(got2) != len(got) {
		t.Fatalf("seeded loss not deterministic: %+v vs %+v", n2.Stats(), s)
	}
	for i := range got {
		if seqOf(got[i]) != seqOf(got2[i]) {
			t.Fatalf("seeded loss not deterministic at packet %d", i)
		}
	}
}

func TestDuplicate(t *testing.T) {
	n, a, b := setup(t, Faults{Duplicate: 0.05, Seed: 3})
	rx := startDrain(b)
	sendPaced(t, n, a, addrB, faultN, 64)
	got := rx.wait(t, 20*time.Millisecond)
	s := n.Stats()
	near(t, "Duplicated", s.Duplicated, 0.05, faultN)
	if s.Delivered != faultN+s.Duplicated || uint64(len(got)) != s.Delivered || s.Lost != 0 {
		t.Fatalf("stats %+v, received %d", s, len(got))
	}
	dups := 0
	for i := 1; i < len(got); i++ {
		if seqOf(got[i]) == seqOf(got[i-1]) {
			dups++
		}
	}
	if uint64(dups) != s.Duplicated {
		t.Fatalf("saw %d adjacent duplicates, stats say %d", dups, s.Duplicated)
	}
}

func TestReorder(t *testing.T) {
	n, a, b := setup(t, Faults{Reorder: 0.05, Seed: 5})
	rx := startDrain(b)
	sendPaced(t, n, a, addrB, faultN, 64)
	got := rx.wait(t, 20*time.Millisecond)
	s := n.Stats()
	near(t, "Reordered", s.Reordered, 0.05, faultN)
	if s.Delivered != faultN || uint64(len(got)) != faultN || s.Lost != 0 {
		t.Fatalf("stats %+v, received %d", s, len(got))
	}
	late := 0
	seen := make(map[uint32]bool)
	for i, p := range got {
		seen[seqOf(p)] = true
		if i > 0 && seqOf(p) < seqOf(got[i-1]) {
			late++
		}
	}
	if len(seen) != faultN {
		t.Fatalf("%d distinct packets", len(seen))
	}
	if late == 0 {
		t.Fatal("no out-of-order arrival")
	}
	t.Logf("%d out-of-order arrivals", late)
}

// TestReorderLone checks that a held packet with no successor is flushed.
func TestReorderLone(t *testing.T) {
	_, a, b := setup(t, Faults{Reorder: 1})
	start := time.Now()
	sendSeq(t, a, addrB, 1, 64)
	rx := bufs(1, 100)
	if k, err := b.Recv(rx); err != nil || k != 1 {
		t.Fatalf("Recv = %d, %v", k, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("held packet delivered after %v", d)
	}
}

func TestCorrupt(t *testing.T) {
	n, a, b := setup(t, Faults{Corrupt: 0.1, Seed: 9})
	rx := startDrain(b)
	sendPaced(t, n, a, addrB, faultN, 64)
	got := rx.wait(t, 20*time.Millisecond)
	s := n.Stats()
	near(t, "Corrupted", s.Corrupted, 0.1, faultN)
	bad, differing := 0, 0
	for _, p := range got {
		var want link.Packet
		want.Buf = make([]byte, 64)
		numbered(&want, seqOf(p), 64, addrB)
		differ := !bytes.Equal(p.Buf, want.Bytes())
		switch {
		case p.ICRC == link.ICRCBad:
			bad++
			if differ {
				differing++
			}
		case p.ICRC != link.ICRCGood || differ:
			t.Fatalf("ICRC %v, bytes differ %v", p.ICRC, differ)
		}
	}
	if uint64(bad) != s.Corrupted || uint64(len(got)) != faultN {
		t.Fatalf("%d bad of %d received, stats %+v", bad, len(got), s)
	}
	// The flipped bit is in the ICRC itself for about 4 bytes in 67;
	// otherwise the packet bytes differ. (A flip in the sequence number
	// bytes also changes seqOf, and then the comparison is against the
	// wrong pattern, which differs too.)
	if differing < bad*8/10 {
		t.Fatalf("only %d of %d bad packets differ in their bytes", differing, bad)
	}
	t.Logf("%d bad packets, %d with differing bytes", bad, differing)
}

func TestDelay(t *testing.T) {
	const delay = 30 * time.Millisecond
	_, a, b := setup(t, Faults{Delay: delay, Jitter: 5 * time.Millisecond})
	tx := bufs(1, 100)
	rx := bufs(1, 100)
	for i := range 5 {
		numbered(&tx[0], uint32(i), 40, addrB)
		start := time.Now()
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		if k, err := b.Recv(rx); err != nil || k != 1 {
			t.Fatalf("Recv = %d, %v", k, err)
		}
		if d := time.Since(start); d < delay {
			t.Fatalf("delivered after %v, want at least %v", d, delay)
		}
	}
}

// TestJitterReorders checks that jitter lets packets overtake each other
// and that everything still arrives.
func TestJitterReorders(t *testing.T) {
	n, a, b := setup(t, Faults{Jitter: 5 * time.Millisecond, Seed: 2})
	rx := startDrain(b)
	sendSeq(t, a, addrB, 500, 64)
	got := rx.wait(t, 30*time.Millisecond)
	late := 0
	for i := 1; i < len(got); i++ {
		if seqOf(got[i]) < seqOf(got[i-1]) {
			late++
		}
	}
	if len(got) != 500 || late == 0 || n.Stats().Delivered != 500 {
		t.Fatalf("received %d, %d late", len(got), late)
	}
}

func TestClose(t *testing.T) {
	n, a, b := setup(t, Faults{Delay: time.Hour})
	sendSeq(t, a, addrB, 10, 64) // pending on the timer
	errc := make(chan error, 3)
	for _, e := range []*Endpoint{a, b, b} {
		go func() {
			_, err := e.Recv(bufs(1, 100))
			errc <- err
		}()
	}
	time.Sleep(10 * time.Millisecond)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case err := <-errc:
			if !errors.Is(err, link.ErrClosed) {
				t.Fatalf("Recv: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock Recv")
		}
	}
	n.Close()
	if err := a.Send(bufs(1, 100)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	if _, err := n.Endpoint(netip.MustParseAddrPort("10.0.0.3:1")); err == nil {
		t.Fatal("Endpoint on a closed network succeeded")
	}
}

// TestEndpointClose checks that closing an endpoint frees its address and
// that queued packets are not delivered after Close.
func TestEndpointClose(t *testing.T) {
	n, a, b := setup(t, Faults{})
	sendSeq(t, a, addrB, 3, 64)
	b.Close()
	b.Close()
	if _, err := b.Recv(bufs(4, 100)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	sendSeq(t, a, addrB, 1, 64) // now unknown: lost
	if s := n.Stats(); s.Lost != 1 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := n.Endpoint(addrB); err != nil {
		t.Fatalf("address not freed: %v", err)
	}
}

func TestUnknownDestination(t *testing.T) {
	n, a, b := setup(t, Faults{})
	sendSeq(t, a, netip.MustParseAddrPort("10.0.0.9:4791"), 5, 64)
	sendSeq(t, a, netip.MustParseAddrPort("10.0.0.2:4792"), 5, 64)
	sendSeq(t, a, addrB, 1, 64)
	rx := bufs(4, 100)
	if k, err := b.Recv(rx); err != nil || k != 1 {
		t.Fatalf("Recv = %d, %v", k, err)
	}
	if s := n.Stats(); s != (Stats{Sent: 11, Delivered: 1, Lost: 10}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestEndpointAddresses(t *testing.T) {
	n := NewNetwork(Faults{})
	defer n.Close()
	if _, err := n.Endpoint(netip.AddrPort{}); err == nil {
		t.Fatal("invalid address accepted")
	}
	ip := netip.MustParseAddr("10.1.1.1")
	e1, err := n.Endpoint(netip.AddrPortFrom(ip, 0))
	if err != nil || e1.LocalAddr().Port() != link.RoCEv2Port {
		t.Fatalf("first port-0 endpoint: %v %v", e1.LocalAddr(), err)
	}
	e2, err := n.Endpoint(netip.AddrPortFrom(ip, 0))
	if err != nil || e2.LocalAddr().Port() == link.RoCEv2Port {
		t.Fatalf("second port-0 endpoint: %v %v", e2.LocalAddr(), err)
	}
	if _, err := n.Endpoint(e2.LocalAddr()); err == nil {
		t.Fatal("address in use accepted")
	}
	// IPv4-mapped addresses are the same as IPv4 ones.
	if _, err := n.Endpoint(netip.MustParseAddrPort("[::ffff:10.1.1.1]:4791")); err == nil {
		t.Fatal("mapped duplicate accepted")
	}
	// IPv6 works too.
	e6, err := n.Endpoint(netip.MustParseAddrPort("[fd00::1]:4791"))
	if err != nil {
		t.Fatal(err)
	}
	tx := bufs(1, 100)
	numbered(&tx[0], 1, 50, e6.LocalAddr())
	if err := e1.Send(tx); err != nil {
		t.Fatal(err)
	}
	rx := bufs(1, 100)
	if k, err := e6.Recv(rx); err != nil || k != 1 || rx[0].ICRC != link.ICRCGood {
		t.Fatalf("Recv = %d, %v, %v", k, err, rx[0].ICRC)
	}
}

func TestSetFaults(t *testing.T) {
	n, a, b := setup(t, Faults{})
	rx := startDrain(b)
	sendSeq(t, a, addrB, 100, 64)
	n.SetFaults(Faults{Loss: 1})
	sendSeq(t, a, addrB, 100, 64)
	n.SetFaults(Faults{})
	sendSeq(t, a, addrB, 100, 64)
	got := rx.wait(t, 10*time.Millisecond)
	if s := n.Stats(); len(got) != 200 || s.Lost != 100 || s.Delivered != 200 {
		t.Fatalf("received %d, stats %+v", len(got), s)
	}
}

func TestOverflowAndOversize(t *testing.T) {
	n, a, b := setup(t, Faults{})
	sendSeq(t, a, addrB, QueueLen+10, 12)
	if s := n.Stats(); s.Lost != 10 {
		t.Fatalf("full queue: stats %+v", s)
	}
	b.Close()
	b2, err := n.Endpoint(addrB)
	if err != nil {
		t.Fatal(err)
	}
	sendSeq(t, a, addrB, 1, 200)
	sendSeq(t, a, addrB, 1, 20)
	rx := bufs(2, 100) // too small for the first packet
	k, err := b2.Recv(rx)
	if err != nil || k != 1 || rx[0].N != 20 {
		t.Fatalf("Recv = %d, %v, N %d", k, err, rx[0].N)
	}
	if s := n.Stats(); s.Lost != 11 {
		t.Fatalf("oversize: stats %+v", s)
	}
	// A short packet is lost; a bad length is an error.
	tx := bufs(2, 100)
	numbered(&tx[0], 0, 12, addrB)
	tx[0].N = 11
	numbered(&tx[1], 0, 12, addrB)
	tx[1].N = 101
	if err := a.Send(tx); err == nil {
		t.Fatal("bad length accepted")
	}
	if s := n.Stats(); s.Lost != 12 {
		t.Fatalf("short: stats %+v", s)
	}
}

func TestConcurrent(t *testing.T) {
	n, a, b := setup(t, Faults{Loss: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Jitter: 100 * time.Microsecond})
	c, err := n.Endpoint(netip.MustParseAddrPort("10.0.0.3:4791"))
	if err != nil {
		t.Fatal(err)
	}
	rx := startDrain(b)
	var wg sync.WaitGroup
	for _, e := range []*Endpoint{a, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx := bufs(1, 200)
			for i := range 2000 {
				numbered(&tx[0], uint32(i), 100, addrB)
				if err := e.Send(tx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := rx.wait(t, 30*time.Millisecond)
	s := n.Stats()
	if s.Sent != 4000 || s.Delivered != uint64(len(got)) || s.Delivered+s.Lost != s.Sent+s.Duplicated {
		t.Fatalf("stats %+v, received %d", s, len(got))
	}
}

func TestZeroAlloc(t *testing.T) {
	// Faults that act synchronously at Send: after Send returns, every
	// packet is queued or counted lost.
	for _, f := range []Faults{{}, {Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1}} {
		n, a, b := setup(t, f)
		tx := bufs(32, 4200)
		for i := range tx {
			numbered(&tx[i], uint32(i), 4096+28, addrB)
		}
		rx := bufs(64, 4200)
		failed := false
		round := func() {
			if err := a.Send(tx); err != nil {
				failed = true
				return
			}
			for {
				s := n.Stats()
				if s.Delivered+s.Lost == s.Sent+s.Duplicated {
					return
				}
				if _, err := b.Recv(rx); err != nil {
					failed = true
					return
				}
			}
		}
		for range 10 {
			round() // warm up the free list
		}
		allocs := testing.AllocsPerRun(100, round)
		if failed {
			t.Fatal("Send or Recv failed")
		}
		if allocs != 0 {
			t.Errorf("faults %+v: %v allocations per Send(32)+Recv", f, allocs)
		}
	}
}

func BenchmarkPipe(b *testing.B) {
	n := NewNetwork(Faults{})
	defer n.Close()
	a, _ := n.Endpoint(addrA)
	c, _ := n.Endpoint(addrB)
	tx := bufs(64, 4200)
	for i := range tx {
		numbered(&tx[i], uint32(i), 4096, addrB)
	}
	rx := bufs(64, 4200)
	b.SetBytes(4096 * 64)
	b.ReportAllocs()
	for b.Loop() {
		a.Send(tx)
		for got := 0; got < 64; {
			k, _ := c.Recv(rx)
			got += k
		}
	}
}
