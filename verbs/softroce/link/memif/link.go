//go:build linux

package memif

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/internal/ethframe"
	"github.com/rsock-go/rsock/verbs/softroce/link/internal/eventfd"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Stats counts what a link did.
type Stats struct {
	// Sent and Received count frames.
	Sent, Received uint64
	// TxDropped counts packets Send dropped for lack of ring space after
	// waiting Config.TxWait.
	TxDropped uint64
	// RxDropped counts received frames that were not RoCEv2 packets to
	// port 4791, or longer than MaxFrameLen.
	RxDropped uint64
	// Interrupts counts eventfd signals sent to the peer; Sleeps counts
	// times the receiver slept on its eventfd, and SleepTimeouts those
	// sleeps that ended without a signal (idle, or a missed interrupt).
	Interrupts, Sleeps, SleepTimeouts uint64
}

// Link is a memif connection used as a link.Link. Its methods are safe
// for concurrent use.
type Link struct {
	cfg    Config
	client bool
	peer   string // the peer's interface name

	ctrl *control
	regs []region

	life   sync.RWMutex // held for reading while regions or eventfds are used; Close takes it to unmap
	closed atomic.Bool
	errMu  sync.Mutex
	err    error // why the link failed, or ErrClosed
	done   chan struct{}

	txMu  sync.Mutex
	tx    txQueue
	txEvt *eventfd.FD // signals the peer

	// batchMu guards inBatch, set while RecvLoop's batch points into the
	// regions, and unmapAfterBatch, set by a Close during one.
	batchMu                  sync.Mutex
	inBatch, unmapAfterBatch bool

	rxMu   sync.Mutex
	rx     rxQueue
	rxEvt  *eventfd.FD // the peer signals us
	rxBufs [][]byte
	spin   time.Duration

	sent, received, txDropped, rxDropped, interrupts, sleeps, sleepTimeouts atomic.Uint64
}

// errConnLost reports the control channel failing after setup.
var errConnLost = errors.New("memif: connection lost")

var _ link.Link = (*Link)(nil)
var _ link.Looper = (*Link)(nil)

const (
	// maxSpin bounds the receiver's adaptive polling before it sleeps.
	maxSpin = 50 * time.Microsecond
	// idleWake bounds one sleep on the eventfd. A sender that publishes
	// without a full barrier before reading the ring flags (DPDK's does)
	// can miss an interrupt the receiver just unmasked; waking now and
	// then bounds the delay that costs.
	idleWake = 100 * time.Millisecond
)

// Name returns "memif".
func (l *Link) Name() string { return "memif" }

// LocalAddr returns Config.Local.
func (l *Link) LocalAddr() netip.AddrPort { return l.cfg.Local }

// PeerName returns the interface name the peer sent in CONNECT or
// CONNECTED.
func (l *Link) PeerName() string { return l.peer }

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	return Stats{l.sent.Load(), l.received.Load(), l.txDropped.Load(), l.rxDropped.Load(),
		l.interrupts.Load(), l.sleeps.Load(), l.sleepTimeouts.Load()}
}

// Err returns why the link stopped working (ErrClosed after Close), or nil.
func (l *Link) Err() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

// fail records the first failure, tells the peer and wakes the receiver.
func (l *Link) fail(err error) {
	l.errMu.Lock()
	first := l.err == nil
	if first {
		l.err = err
	}
	l.errMu.Unlock()
	if !first {
		return
	}
	var de *DisconnectError
	switch {
	case errors.Is(err, link.ErrClosed):
		l.ctrl.disconnect("interface closed")
	case errors.As(err, &de), errors.Is(err, errConnLost):
	default:
		l.ctrl.disconnect(err.Error())
	}
	l.ctrl.c.Close()
	l.rxEvt.Signal()
}

// enter takes the lifetime lock for using the rings; it fails once the
// link failed or is closing.
func (l *Link) enter() error {
	l.life.RLock()
	if l.closed.Load() {
		l.life.RUnlock()
		return link.ErrClosed
	}
	if err := l.Err(); err != nil {
		l.life.RUnlock()
		return err
	}
	return nil
}

// SendsTails reports that Send takes packets in two pieces
// (link.Packet.Tail): it copies them into the ring piece by piece.
func (l *Link) SendsTails() bool { return true }

var _ link.TailSender = (*Link)(nil)

// Send frames and transmits pkts; see link.Link.
func (l *Link) Send(pkts []link.Packet) error {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	var hdr [ethframe.MaxHeaderLen]byte
	var icrc [wire.ICRCLen]byte
	var pieces [4][]byte
	ends := ethframe.Ends{SrcMAC: l.cfg.LocalMAC, DstMAC: l.cfg.PeerMAC, Src: l.cfg.Local}
	pending := false
	for i := range pkts {
		p := &pkts[i]
		if p.N < wire.BTHLen || p.N > len(p.Buf) {
			return fmt.Errorf("memif: packet of %d bytes in a %d-byte buffer", p.N, len(p.Buf))
		}
		pkt := p.Buf[:p.N]
		ends.Dst = p.Addr
		hl, err := ethframe.HeadersTail(hdr[:], &ends, pkt, p.Tail, &icrc)
		if err != nil {
			return fmt.Errorf("memif: %w", err)
		}
		total := hl + p.N + len(p.Tail) + wire.ICRCLen
		if total > MaxFrameLen {
			return fmt.Errorf("memif: %d-byte frame exceeds %d", total, MaxFrameLen)
		}
		pieces = [4][]byte{hdr[:hl], pkt, p.Tail, icrc[:]}
		var waited time.Duration
		for try := 0; ; try++ {
			if err := l.enter(); err != nil {
				return err
			}
			free, err := l.tx.free()
			used := 0
			if err == nil {
				used, err = l.tx.put(pieces[:], total, free)
			}
			if err != nil {
				l.life.RUnlock()
				l.fail(err)
				return err
			}
			if used > 0 {
				pending = true
				l.life.RUnlock()
				l.sent.Add(1)
				break
			}
			// Full: let the receiver see what we have, then back off.
			if pending {
				l.publish()
				pending = false
			}
			l.life.RUnlock()
			if waited >= l.cfg.TxWait {
				l.txDropped.Add(1)
				break
			}
			d := txBackoff(try)
			if d == 0 {
				runtime.Gosched()
				waited += time.Microsecond
			} else {
				time.Sleep(d)
				waited += d
			}
		}
	}
	if pending {
		if err := l.enter(); err != nil {
			return err
		}
		l.publish()
		l.life.RUnlock()
	}
	return nil
}

// publish publishes filled slots and interrupts the peer if it asked;
// the caller holds txMu and the lifetime lock.
func (l *Link) publish() {
	if l.tx.publish() {
		l.txEvt.Signal()
		l.interrupts.Add(1)
	}
}

// txBackoff is how long Send waits after its try-th attempt found the
// ring full: yield a few times, then sleep longer and longer up to 1 ms.
func txBackoff(try int) time.Duration {
	if try < 8 {
		return 0
	}
	return min(time.Duration(1<<min(try-8, 10))*time.Microsecond, time.Millisecond)
}

// Recv receives frames; see link.Link. Packet buffers are owned by the
// link: each is valid until the next Recv.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.growBufs(len(pkts))
	for {
		n, err := l.poll(pkts)
		if n > 0 || err != nil {
			return n, err
		}
		if err := l.waitRx(); err != nil {
			return 0, err
		}
	}
}

// RecvLoop receives batches and hands each to handle until the link is
// closed or fails; see link.Looper. Unlike Recv it leaves the payload of a
// frame held in one buffer where the peer put it (link.Packet.Tail): it
// copies only the frame's headers, and gives the slots back to the peer
// after handle returns; Close during a batch leaves the unmapping to the
// loop.
func (l *Link) RecvLoop(pkts []link.Packet, handle func([]link.Packet)) error {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.growBufs(len(pkts))
	for {
		n, used, err := l.pollInPlace(pkts)
		if err == nil && n > 0 {
			handle(pkts[:n])
			l.received.Add(uint64(n))
		}
		if l.endBatch(used) {
			return link.ErrClosed
		}
		if err != nil {
			return err
		}
		if used == 0 {
			if err := l.waitRx(); err != nil {
				return err
			}
		}
	}
}

// growBufs makes sure there is a receive buffer for each of n packets;
// the caller holds rxMu.
func (l *Link) growBufs(n int) {
	for len(l.rxBufs) < n {
		l.rxBufs = append(l.rxBufs, make([]byte, MaxFrameLen))
	}
}

// pollInPlace fills pkts from the frames waiting in the ring as poll does,
// but for a frame in one buffer it copies only the first
// ethframe.SplitHeadLen bytes and leaves the payload in the shared memory.
// It does not release the slots the frames took (used): the packets point
// into them until the caller releases them.
func (l *Link) pollInPlace(pkts []link.Packet) (got, used int, err error) {
	if err := l.enter(); err != nil {
		return 0, 0, err
	}
	defer l.life.RUnlock()
	avail, err := l.rx.avail()
	if err != nil {
		l.fail(err)
		return 0, 0, err
	}
	if avail > 0 {
		l.batchMu.Lock()
		l.inBatch = true
		l.batchMu.Unlock()
	}
	got, used, err = l.take(pkts, avail, true)
	if err != nil {
		return 0, 0, err
	}
	return got, used, nil
}

// take fills pkts from the frames among the avail waiting in the ring:
// copied whole into the link's buffers, or with inPlace, a frame in one
// buffer with only its first ethframe.SplitHeadLen bytes copied and its
// payload left in the shared memory. It reports the slots the frames took
// and releases none. The caller holds the lifetime lock.
func (l *Link) take(pkts []link.Packet, avail int, inPlace bool) (got, used int, err error) {
	for got < len(pkts) && used < avail {
		var buf []byte
		one := false
		if inPlace {
			if buf, one, err = l.rx.single(used); err != nil {
				l.fail(err)
				return got, used, err
			}
		}
		if one && len(buf) > ethframe.SplitHeadLen && len(buf) <= MaxFrameLen {
			used++
			head := l.rxBufs[got][:ethframe.SplitHeadLen]
			copy(head, buf)
			if ethframe.DeliverSplit(&pkts[got], head, buf) {
				got++
				continue
			}
			// Not a frame whose headers fit in head: copy it whole.
			if l.deliver(&pkts[got], l.rxBufs[got][:copy(l.rxBufs[got], buf)]) {
				got++
			} else {
				l.rxDropped.Add(1)
			}
			continue
		}
		n, slots, res, err := l.rx.next(l.rxBufs[got], used, avail-used)
		if err != nil {
			l.fail(err)
			return got, used, err
		}
		if res == rxIncomplete {
			break
		}
		used += slots
		if res == rxOversize || !l.deliver(&pkts[got], l.rxBufs[got][:n]) {
			l.rxDropped.Add(1)
			continue
		}
		got++
	}
	return got, used, nil
}

// poll moves the frames waiting in the ring (up to len(pkts)) into the
// link's buffers and fills pkts from them.
func (l *Link) poll(pkts []link.Packet) (int, error) {
	if err := l.enter(); err != nil {
		return 0, err
	}
	defer l.life.RUnlock()
	avail, err := l.rx.avail()
	if err != nil {
		l.fail(err)
		return 0, err
	}
	got, used, err := l.take(pkts, avail, false)
	if err != nil {
		l.rx.release(used)
		return 0, err
	}
	l.rx.release(used)
	l.received.Add(uint64(got))
	return got, nil
}

// deliver fills p from a received frame, checking its ICRC.
func (l *Link) deliver(p *link.Packet, frame []byte) bool {
	fr, ok := ethframe.Decode(frame)
	if ok {
		ethframe.Deliver(p, &fr)
	}
	return ok
}

// waitRx waits for frames: it polls the ring for the adaptive spin time,
// then unmasks the interrupt and sleeps on the eventfd.
func (l *Link) waitRx() error {
	if l.spin > 0 {
		start := time.Now()
		for i := 0; ; i++ {
			n, err := l.pending()
			if err != nil {
				return err
			}
			if n {
				l.spin = min(l.spin*2, maxSpin)
				return nil
			}
			if i%16 == 15 && time.Since(start) > l.spin {
				break
			}
			runtime.Gosched()
		}
	}
	if err := l.enter(); err != nil {
		return err
	}
	l.rx.arm(true)
	n, err := l.rx.avail()
	l.life.RUnlock()
	if err != nil {
		l.fail(err)
		return err
	}
	if n == 0 {
		l.sleeps.Add(1)
		start := time.Now()
		timedOut, err := l.rxEvt.Wait(idleWake)
		if timedOut {
			l.sleepTimeouts.Add(1)
		}
		if err != nil {
			if e := l.Err(); e != nil {
				return e
			}
			return fmt.Errorf("memif: waiting for interrupt: %w", err)
		}
		// A wake-up that polling would have caught soon enough makes
		// polling worth it; a long sleep makes it less so.
		if time.Since(start) < maxSpin {
			l.spin = min(max(l.spin*2, 2*time.Microsecond), maxSpin)
		} else {
			l.spin /= 2
		}
	}
	if err := l.enter(); err != nil {
		return err
	}
	l.rx.arm(false)
	l.life.RUnlock()
	return nil
}

// pending reports whether frames are waiting.
func (l *Link) pending() (bool, error) {
	if err := l.enter(); err != nil {
		return false, err
	}
	n, err := l.rx.avail()
	l.life.RUnlock()
	if err != nil {
		l.fail(err)
		return false, err
	}
	return n > 0, nil
}

// watch reads the control channel after setup: a DISCONNECT or the
// socket closing (the peer exited) fails the link.
func (l *Link) watch() {
	defer close(l.done)
	for {
		m, fd, err := l.ctrl.recv(time.Time{})
		if err != nil {
			if !l.closed.Load() {
				l.fail(fmt.Errorf("%w: %w", errConnLost, err))
			}
			return
		}
		if fd >= 0 {
			closeAll([]int{fd})
		}
		if m.Type() != MsgAck {
			l.fail(fmt.Errorf("%w: unexpected %v after connecting", ErrProtocol, m.Type()))
			return
		}
	}
}

// Close sends DISCONNECT, stops the link and releases the shared memory.
// It is idempotent.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.fail(link.ErrClosed)
	<-l.done
	l.life.Lock()
	l.rxEvt.Close()
	l.txEvt.Close()
	// A batch that RecvLoop is handling may point into the regions (and
	// Close may be called from its handler): then the loop unmaps them
	// once the batch is done.
	l.batchMu.Lock()
	now := !l.inBatch
	l.unmapAfterBatch = l.inBatch
	l.batchMu.Unlock()
	if now {
		l.unmap()
	}
	l.life.Unlock()
	return nil
}

// unmap releases the shared memory.
func (l *Link) unmap() {
	for i := range l.regs {
		l.regs[i].close()
	}
}

// endBatch gives the used slots of a batch RecvLoop handled back to the
// peer, and unmaps the regions if Close came during the batch.
func (l *Link) endBatch(used int) (closed bool) {
	l.batchMu.Lock()
	defer l.batchMu.Unlock()
	l.inBatch = false
	if l.unmapAfterBatch {
		l.unmap()
		return true
	}
	l.rx.release(used)
	return false
}

// RingState describes the rings' shared indexes and this side's own, for
// diagnostics.
func (l *Link) RingState() string {
	if err := l.enter(); err != nil {
		return err.Error()
	}
	defer l.life.RUnlock()
	return fmt.Sprintf("tx: head %d tail %d flags %#x, next %d; rx: head %d tail %d flags %#x, next %d offered %d",
		l.tx.ring.Head(), l.tx.ring.Tail(), l.tx.ring.Flags(), l.tx.idx,
		l.rx.ring.Head(), l.rx.ring.Tail(), l.rx.ring.Flags(), l.rx.last, l.rx.offered)
}
