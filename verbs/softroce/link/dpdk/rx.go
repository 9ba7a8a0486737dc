//go:build dpdk

package dpdk

import (
	"runtime"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk/internal/rte"
	"github.com/rsock-go/rsock/verbs/softroce/link/internal/ethframe"
)

// Receiver timing.
const (
	// yieldEvery is how many empty polls the receiver makes between two
	// yields to other goroutines.
	yieldEvery = 4
	// idleWake bounds one sleep on the rx interrupt.
	idleWake = 100 * time.Millisecond
	// minBackoff and maxBackoff bound one sleep between polls of a port
	// without rx interrupts; the sleeps double from one to the other.
	// They are timerfd sleeps: time.Sleep would round those under a
	// millisecond up to one when the process is otherwise idle. After
	// deepIdle without frames they grow on to maxIdleSleep. These are
	// the added latency of the first packet after a pause; a wake-up
	// costs some 40 µs of CPU on the 2-core test machine (the runtime's
	// thread wake-ups included), so 500 a second would cost 2% of a core
	// and 20 under 0.1%.
	minBackoff   = 20 * time.Microsecond
	maxBackoff   = 2 * time.Millisecond
	deepIdle     = time.Second
	maxIdleSleep = 50 * time.Millisecond
)

// Recv receives packets; see link.Link. Packet buffers are views of
// DPDK's mbufs, valid until the next Recv.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	return l.recv(pkts)
}

// RecvLoop receives and hands each batch to handle until the link is
// closed; see link.Looper.
//
// The loop does not lock its OS thread: a goroutine that a batch wakes
// (a reader, a completion waiter) then runs on the loop's own thread
// when the loop yields, where on a locked thread every wake-up crosses
// to another thread and back (measured: 64-byte ping-pong p50 96 µs
// locked, 9 µs not, over net_memif on 2 cores).
func (l *Link) RecvLoop(pkts []link.Packet, handle func([]link.Packet)) error {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	for {
		n, err := l.recv(pkts)
		if err != nil {
			return err
		}
		handle(pkts[:n])
	}
}

// recv polls the port until RoCEv2 packets arrive, handling ARP and
// neighbour discovery on the way. It keeps polling for cfg.Poll after the last frame, yielding to
// other goroutines between polls, and then sleeps: on the rx interrupt
// where the port has one, else for doubling times up to maxBackoff, and
// maxIdleSleep once idle for deepIdle. The caller holds rxMu.
func (l *Link) recv(pkts []link.Packet) (int, error) {
	burst := min(len(pkts), rte.Burst)
	for polls := 1; ; polls++ {
		if l.closed.Load() {
			rte.ReleaseRx(&l.rx)
			return 0, link.ErrClosed
		}
		n := rte.Rx(l.port, &l.rx, burst)
		if n == 0 {
			switch {
			case time.Since(l.lastRx) < l.cfg.Poll:
				if polls%yieldEvery == 0 {
					runtime.Gosched()
				}
				continue
			case l.intr != nil:
				if n = l.sleepIntr(burst); n == 0 {
					continue
				}
			default:
				limit := maxBackoff
				if time.Since(l.lastRx) > deepIdle {
					limit = maxIdleSleep
				}
				l.backoff = min(max(2*l.backoff, minBackoff), limit)
				l.sleeps.Add(1)
				l.nap.Sleep(l.backoff) // ends early on Close, which the loop checks
				continue
			}
		}
		l.lastRx, l.backoff = time.Now(), 0
		if got := l.sort(pkts, n); got > 0 {
			l.received.Add(uint64(got))
			return got, nil
		}
	}
}

// sort fills pkts from the n frames just received, answers ARP and
// neighbour solicitations, learns from them and from advertisements,
// and counts the rest as dropped; it returns the number of packets.
func (l *Link) sort(pkts []link.Packet, n int) int {
	got := 0
	for i := range n {
		f := l.rx.Data(i, int(l.rx.Len[i]))
		kind, fr := frameOther, ethframe.Frame{}
		if len(f) > 0 {
			kind, fr = l.st.classify(f)
		}
		switch kind {
		case frameRoCE:
			ethframe.Deliver(&pkts[got], &fr)
			got++
		case frameARP, frameND:
			var reply ctlFrame
			var learned bool
			l.neighMu.Lock()
			if kind == frameARP {
				l.arpIn.Add(1)
				reply.n, learned = l.st.arpInput(f, l.neigh, time.Now(), reply.b[:])
			} else {
				l.ndIn.Add(1)
				reply.n, learned = l.st.ndInput(f, l.neigh, time.Now(), reply.b[:])
				reply.nd = true
			}
			if learned { // wake the senders waiting for an answer
				close(l.neighWake)
				l.neighWake = make(chan struct{})
			}
			l.neighMu.Unlock()
			if reply.n > 0 {
				l.ctlOut = append(l.ctlOut, reply)
			}
		default:
			l.rxDropped.Add(1)
		}
	}
	for i := range l.ctlOut {
		l.sendFrame(&l.ctlOut[i])
	}
	l.ctlOut = l.ctlOut[:0]
	return got
}

// sleepIntr arms the rx interrupt and sleeps on it, unless a poll after
// arming finds frames (a frame that arrived before arming raised no
// interrupt); it returns the frames of that poll.
func (l *Link) sleepIntr(burst int) int {
	if rte.RxIntrEnable(l.port) != nil {
		runtime.Gosched()
		return 0
	}
	defer rte.RxIntrDisable(l.port)
	if n := rte.Rx(l.port, &l.rx, burst); n > 0 || l.closed.Load() {
		return n
	}
	l.sleeps.Add(1)
	l.intr.Wait(idleWake)
	return 0
}
