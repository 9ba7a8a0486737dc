// Package pipe is an in-memory soft-RoCE link for tests: a Network joins
// any number of Endpoints, each a link.Link, and injects faults (loss,
// duplication, reordering, corruption, delay and jitter) with deterministic
// randomness.
//
// Send computes and appends each packet's ICRC exactly as the udp link does
// (IPv4 ID 0), and Recv checks it. Unlike a UDP socket the pipe sees every
// covered field, so Recv reports only link.ICRCGood or link.ICRCBad. Recv
// stamps each packet with when it reached the receiver (Packet.Arrived).
//
// Packets are copied into buffers from a bounded free list and queued on
// the destination's bounded receive queue (QueueLen packets; overflow drops
// the packet, like a NIC ring). Steady-state Send and Recv without delay do
// not allocate. Delayed packets and the flushing of reordered ones share a
// single timer per Network; Close stops it.
package pipe

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

const (
	// QueueLen is the capacity, in packets, of each endpoint's receive
	// queue. A packet arriving at a full queue is dropped and counted Lost.
	QueueLen = 4096
	// ReorderFlush bounds how long a packet held back for reordering waits
	// for a later packet to the same destination before it is delivered
	// anyway.
	ReorderFlush = time.Millisecond

	// bufSize is the capacity of pooled buffers: the largest RoCEv2 packet
	// with a 4096-byte MTU, its headers and ICRC, with room to spare.
	bufSize = 4096 + 256
	// maxFree bounds the free list.
	maxFree = 2 * QueueLen
	// minPacket is the shortest packet carried: a BTH.
	minPacket = 12
	// bthECNByte is the BTH byte that the ICRC masks; corruption avoids it
	// so that every corrupted packet fails the ICRC check.
	bthECNByte = 4
)

// Faults are the impairments a Network applies to each packet at Send.
type Faults struct {
	// Loss, Duplicate, Reorder and Corrupt are per-packet probabilities in
	// [0,1] of dropping the packet, delivering it twice, holding it back
	// until after the next packet to the same destination (or at most
	// ReorderFlush), and flipping one bit of it (never in the BTH byte
	// the ICRC masks, so that the ICRC check fails).
	Loss, Duplicate, Reorder, Corrupt float64
	// Delay is a fixed extra delay per packet (0 means none).
	Delay time.Duration
	// Jitter adds a uniformly random extra delay in [0, Jitter) per packet.
	// Jittered packets can overtake each other.
	Jitter time.Duration
	// Hold is how long the receiving host holds each packet after it
	// arrived, before Recv may return it, as a busy process's socket
	// queue does: Packet.Arrived says when it arrived, Hold before Recv
	// can see it. It adds to Delay and Jitter.
	Hold time.Duration
	// Mark is the probability of setting CE on an ECN-capable packet
	// (Packet.ECN ECT(0) or ECT(1)), as a marking queue would. The
	// network carries every packet's ECN codepoint to Recv.
	Mark float64
	// Seed seeds the deterministic random source (a math/rand/v2 PCG);
	// 0 means 1.
	Seed int64
}

// Stats counts what a Network did with packets.
type Stats struct {
	// Sent counts packets handed to Send (not counting malformed ones
	// rejected with an error).
	Sent uint64
	// Delivered counts packets returned by Recv, duplicates included.
	Delivered uint64
	// Lost counts packets dropped: by the Loss fault, for an unknown or
	// closed destination, for being shorter than a BTH, for a full
	// receive queue, or for not fitting the buffer passed to Recv.
	Lost uint64
	// Duplicated counts extra copies made by the Duplicate fault.
	Duplicated uint64
	// Reordered counts packets held back by the Reorder fault.
	Reordered uint64
	// Corrupted counts packets with a bit flipped by the Corrupt fault.
	Corrupted uint64
	// Marked counts packets the Mark fault set CE on.
	Marked uint64
}

// Network is an in-memory wire joining Endpoints. All its methods are safe
// for concurrent use.
type Network struct {
	mu     sync.Mutex
	faults Faults
	pcg    *rand.PCG
	rng    *rand.Rand
	eps    map[netip.AddrPort]*Endpoint
	free   [][]byte
	stats  Stats
	closed bool

	start  time.Time
	seq    uint64
	events eventHeap   // delayed deliveries and reorder flushes
	timer  *time.Timer // runs n.fire; one per network
	armed  int64       // due time the timer is set for, or -1
}

// packet is a packet in flight: BTH through ICRC, and its source.
type packet struct {
	buf []byte
	src netip.AddrPort
	ecn link.ECN
	at  int64 // when it reached the receiver's queue (wall clock, ns): Packet.Arrived
}

// NewNetwork returns a network applying faults f.
func NewNetwork(f Faults) *Network {
	n := &Network{
		eps:   make(map[netip.AddrPort]*Endpoint),
		start: time.Now(),
		armed: -1,
		pcg:   rand.NewPCG(0, 0),
	}
	n.rng = rand.New(n.pcg)
	n.setFaults(f)
	n.timer = time.AfterFunc(time.Hour, n.fire)
	n.timer.Stop()
	return n
}

// SetFaults replaces the faults applied to packets sent from now on and
// restarts the random sequence from f.Seed. Packets already delayed or held
// keep their schedule.
func (n *Network) SetFaults(f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setFaults(f)
}

func (n *Network) setFaults(f Faults) {
	f.Delay = max(f.Delay, 0)
	f.Jitter = max(f.Jitter, 0)
	if f.Seed == 0 {
		f.Seed = 1
	}
	n.faults = f
	n.pcg.Seed(uint64(f.Seed), 0x9e3779b97f4a7c15)
}

// Stats returns the network's counters.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Endpoint attaches a new endpoint at addr. Port 0 picks link.RoCEv2Port if
// it is free on that IP and otherwise a free port from 49152 up. It fails
// if addr is in use or the network is closed.
func (n *Network) Endpoint(addr netip.AddrPort) (*Endpoint, error) {
	ip := addr.Addr().Unmap()
	if !ip.IsValid() {
		return nil, errors.New("pipe: endpoint address has no IP")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, link.ErrClosed
	}
	addr = netip.AddrPortFrom(ip, addr.Port())
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(ip, link.RoCEv2Port)
		for p := 49152; n.eps[addr] != nil; p++ {
			if p > 65535 {
				return nil, fmt.Errorf("pipe: no free port on %v", ip)
			}
			addr = netip.AddrPortFrom(ip, uint16(p))
		}
	}
	if n.eps[addr] != nil {
		return nil, fmt.Errorf("pipe: address %v in use", addr)
	}
	e := &Endpoint{n: n, addr: addr, q: make([]packet, QueueLen)}
	e.cond.L = &n.mu
	n.eps[addr] = e
	return e, nil
}

// Close closes every endpoint and stops the network's timer. Later Send and
// Recv calls return link.ErrClosed. It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.timer.Stop()
	n.armed = -1
	for _, e := range n.eps {
		e.closeLocked()
	}
	for i := range n.events {
		n.events[i] = event{}
	}
	n.events = n.events[:0]
	n.free = nil
	return nil
}

func (n *Network) now() int64 { return int64(time.Since(n.start)) }

// chance reports true with probability p.
func (n *Network) chance(p float64) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return n.rng.Float64() < p
}

func (n *Network) getBuf(size int) []byte {
	for len(n.free) > 0 {
		b := n.free[len(n.free)-1]
		n.free[len(n.free)-1] = nil
		n.free = n.free[:len(n.free)-1]
		if cap(b) >= size {
			return b[:size]
		}
	}
	return make([]byte, size, max(size, bufSize))
}

func (n *Network) putBuf(b []byte) {
	if len(n.free) < maxFree && !n.closed {
		n.free = append(n.free, b)
	}
}

func (n *Network) drop(p packet) {
	n.stats.Lost++
	n.putBuf(p.buf)
}

// route sends p towards e after the configured delay; hold asks for it to
// be reordered on arrival.
func (n *Network) route(e *Endpoint, p packet, hold bool, now int64) {
	d := int64(n.faults.Delay)
	if n.faults.Jitter > 0 {
		d += n.rng.Int64N(int64(n.faults.Jitter))
	}
	if h := int64(n.faults.Hold); h > 0 {
		p.at = time.Now().UnixNano() + d
		d += h
	}
	if d <= 0 {
		n.deliver(e, p, hold, now)
		return
	}
	n.schedule(event{due: now + d, dst: e, p: p, hold: hold}, now)
}

// deliver puts p on e's receive queue, or holds it back if hold is set.
// Delivering a packet also releases the packets held back before it.
func (n *Network) deliver(e *Endpoint, p packet, hold bool, now int64) {
	if e.closed {
		n.drop(p)
		return
	}
	if hold {
		e.held = append(e.held, p)
		n.schedule(event{due: now + int64(ReorderFlush), dst: e, flush: true}, now)
		return
	}
	e.enqueue(p)
	e.flushHeld()
}

func (n *Network) schedule(ev event, now int64) {
	n.seq++
	ev.seq = n.seq
	n.events.push(ev)
	if due := n.events[0].due; n.armed < 0 || due < n.armed {
		n.armed = due
		n.timer.Reset(time.Duration(due - now))
	}
}

// fire runs on the network's timer: it delivers the due events and re-arms.
func (n *Network) fire() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.armed = -1
	now := n.now()
	for len(n.events) > 0 && n.events[0].due <= now {
		ev := n.events.pop()
		switch {
		case ev.flush:
			if !ev.dst.closed {
				ev.dst.flushHeld()
			}
		default:
			n.deliver(ev.dst, ev.p, ev.hold, now)
		}
	}
	if len(n.events) > 0 {
		n.armed = n.events[0].due
		n.timer.Reset(time.Duration(n.armed - now))
	}
}

// Endpoint is one attachment to a Network; it implements link.Link.
type Endpoint struct {
	n    *Network
	addr netip.AddrPort
	cond sync.Cond // L is &n.mu; signalled when q gains packets or on close

	// Guarded by n.mu.
	q           []packet // ring of QueueLen packets
	head, count int
	held        []packet // held back for reordering
	closed      bool
}

var _ link.Link = (*Endpoint)(nil)

// Name returns "pipe".
func (e *Endpoint) Name() string { return "pipe" }

// LocalAddr returns the endpoint's address.
func (e *Endpoint) LocalAddr() netip.AddrPort { return e.addr }

func (e *Endpoint) enqueue(p packet) {
	if e.count == len(e.q) {
		e.n.drop(p)
		return
	}
	if p.at == 0 {
		p.at = time.Now().UnixNano()
	}
	e.q[(e.head+e.count)%len(e.q)] = p
	e.count++
	e.cond.Signal()
}

func (e *Endpoint) dequeue() packet {
	p := e.q[e.head]
	e.q[e.head] = packet{}
	e.head = (e.head + 1) % len(e.q)
	e.count--
	return p
}

func (e *Endpoint) flushHeld() {
	for i, p := range e.held {
		e.enqueue(p)
		e.held[i] = packet{}
	}
	e.held = e.held[:0]
}

// Send copies each packet, appends its ICRC (computed with IPv4 ID 0 from
// this endpoint's address to p.Addr), applies the network's faults and
// queues it at the destination. Packets to unknown addresses, and packets
// shorter than a BTH, are dropped and counted Lost. A packet with N outside
// [0, cap(Buf)] is skipped and reported in the returned error. Send never
// blocks on a slow receiver. After Close it returns link.ErrClosed.
func (e *Endpoint) Send(pkts []link.Packet) error {
	n := e.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.closed {
		return link.ErrClosed
	}
	var firstErr error
	now := int64(-1)
	f := &n.faults
	for i := range pkts {
		p := &pkts[i]
		if p.N < 0 || p.N > cap(p.Buf) {
			if firstErr == nil {
				firstErr = fmt.Errorf("pipe: send to %v: packet length %d outside buffer capacity %d", p.Addr, p.N, cap(p.Buf))
			}
			continue
		}
		n.stats.Sent++
		dstAddr := netip.AddrPortFrom(p.Addr.Addr().Unmap(), p.Addr.Port())
		dst := n.eps[dstAddr]
		if dst == nil || p.N < minPacket || n.chance(f.Loss) {
			n.stats.Lost++
			continue
		}
		if now < 0 {
			now = n.now()
		}
		size := p.N + wire.ICRCLen
		buf := n.getBuf(size)
		copy(buf, p.Buf[:p.N])
		ph := wire.PseudoHeader{Src: e.addr, Dst: dstAddr}
		wire.PutICRC(buf[p.N:], wire.ComputeICRC(&ph, buf[:p.N]))
		if n.chance(f.Corrupt) {
			bit := n.rng.IntN((size - 1) * 8)
			i := bit / 8
			if i >= bthECNByte {
				i++
			}
			buf[i] ^= 1 << (bit % 8)
			n.stats.Corrupted++
		}
		ecn := p.ECN & 3
		if (ecn == link.ECNECT0 || ecn == link.ECNECT1) && n.chance(f.Mark) {
			ecn = link.ECNCE
			n.stats.Marked++
		}
		dup := n.chance(f.Duplicate)
		hold := n.chance(f.Reorder)
		if hold {
			n.stats.Reordered++
		}
		n.route(dst, packet{buf: buf, src: e.addr, ecn: ecn}, hold, now)
		if dup {
			n.stats.Duplicated++
			b2 := n.getBuf(size)
			copy(b2, buf)
			n.route(dst, packet{buf: b2, src: e.addr, ecn: ecn}, false, now)
		}
	}
	return firstErr
}

// Recv blocks until at least one packet is queued, then copies up to
// len(pkts) packets into the callers' buffers. A packet of N bytes needs
// len(Buf) >= N+4 (the ICRC is received too); larger ones are dropped and
// counted Lost. The ICRC is checked: status link.ICRCGood or link.ICRCBad.
// After Close it returns link.ErrClosed.
func (e *Endpoint) Recv(pkts []link.Packet) (int, error) {
	n := e.n
	n.mu.Lock()
	if len(pkts) == 0 {
		closed := e.closed
		n.mu.Unlock()
		if closed {
			return 0, link.ErrClosed
		}
		return 0, nil
	}
	k := 0
	for k == 0 {
		for !e.closed && e.count == 0 {
			e.cond.Wait()
		}
		if e.closed {
			n.mu.Unlock()
			return 0, link.ErrClosed
		}
		for k < len(pkts) && e.count > 0 {
			q := e.dequeue()
			dst := &pkts[k]
			if len(q.buf) > len(dst.Buf) {
				n.drop(q)
				continue
			}
			copy(dst.Buf, q.buf)
			dst.N = len(q.buf) - wire.ICRCLen
			dst.Addr = q.src
			dst.ECN = q.ecn
			dst.Arrived = q.at
			n.putBuf(q.buf)
			n.stats.Delivered++
			k++
		}
	}
	n.mu.Unlock()
	for i := range pkts[:k] {
		p := &pkts[i]
		ph := wire.PseudoHeader{Src: p.Addr, Dst: e.addr}
		if wire.ComputeICRC(&ph, p.Buf[:p.N]) == wire.ICRCOf(p.Buf[p.N:]) {
			p.ICRC = link.ICRCGood
		} else {
			p.ICRC = link.ICRCBad
		}
	}
	return k, nil
}

// Close detaches the endpoint from the network, drops its queued packets
// and unblocks Recv. It is idempotent.
func (e *Endpoint) Close() error {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.closeLocked()
	return nil
}

func (e *Endpoint) closeLocked() {
	if e.closed {
		return
	}
	e.closed = true
	n := e.n
	if n.eps[e.addr] == e {
		delete(n.eps, e.addr)
	}
	for e.count > 0 {
		n.putBuf(e.dequeue().buf)
	}
	for i, p := range e.held {
		n.putBuf(p.buf)
		e.held[i] = packet{}
	}
	e.held = e.held[:0]
	e.cond.Broadcast()
}

// event is a scheduled delivery (or, with flush set, a release of dst's
// held packets).
type event struct {
	due   int64 // nanoseconds since the network's start
	seq   uint64
	dst   *Endpoint
	p     packet
	hold  bool
	flush bool
}

func (a *event) before(b *event) bool {
	return a.due < b.due || a.due == b.due && a.seq < b.seq
}

// eventHeap is a binary min-heap of events by (due, seq). It avoids
// container/heap, whose interface boxing would allocate per push.
type eventHeap []event

func (h *eventHeap) push(ev event) {
	*h = append(*h, ev)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(&s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = event{}
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].before(&s[m]) {
			m = l
		}
		if r < len(s) && s[r].before(&s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
