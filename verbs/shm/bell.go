//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The channel's doorbells: each side has one eventfd, passed to the peer
// once at setup, however many completion queues it has. A waiter that
// sleeps sets its CQ's sleeping flag; the peer, after it published to a
// queue pair of a flagged CQ, sets the CQ's bit in the wake bitmap of the
// sleeper's arena (and the bit of that word in the summary), then takes
// the sleeper's bell word and rings the eventfd only if the word was set.
//
// The sleepers take turns reading the doorbell, as no goroutine of the
// channel's own does: the first to sleep reads it through Go's netpoller
// (so a lone sleeper, the common case, is woken by the netpoller with no
// hand-off); each ring it sets the bell word, takes the bitmap and wakes
// the CQs marked there. Other sleepers wait on their CQ and in line for
// the turn, which the reader passes to the first in line when it leaves.
// Completions of this process's own requests and Kick wake waiters
// through Go alone (a reader among them is interrupted with a read
// deadline in the past, which costs no system call).

// peerCQ is one of the peer's completion queues, as a queue pair the peer
// announced names it: its sleeping flag and its bit in the wake bitmap of
// the peer's arena.
type peerCQ struct {
	flag      *atomic.Uint32
	word, sum *atomic.Uint64
	bit, sbit uint64
}

// newPeerCQ locates CQ idx in the peer's arena mem, made for peerMax queue
// pairs; idx must be below peerMax.
func newPeerCQ(mem []byte, peerMax int, idx int) peerCQ {
	w := idx / 64
	return peerCQ{
		flag: u32(mem, cqTableOff+idx*cqWordSize),
		word: u64(mem, wakeOffset(peerMax)+8*w),
		sum:  u64(mem, offWakeSum+8*(w/64)),
		bit:  1 << (idx % 64),
		sbit: 1 << (w % 64),
	}
}

// wake wakes the peer's CQ, whose sleeping flag the caller saw set: it
// marks the CQ in the wake bitmap and rings the peer's doorbell if a
// sleeper of the peer reads it.
func (c *peerCQ) wake(d *Device) {
	if c.word.Load()&c.bit == 0 {
		c.word.Or(c.bit)
	}
	if c.sum.Load()&c.sbit == 0 {
		c.sum.Or(c.sbit)
	}
	d.ringPeer()
}

// peerBell is the peer's doorbell eventfd; Close retires it while a
// waker may still be ringing it.
type peerBell struct {
	pin
	fd int
}

// ringPeer rings the peer's doorbell if a sleeper of the peer reads it
// (its bell word is set); the first waker takes the word, so a burst
// rings once.
func (d *Device) ringPeer() {
	w := u64(d.peerMem, offBell)
	if w.Load() == 0 || w.Swap(0) == 0 {
		return
	}
	d.rings.Add(1)
	if b := d.peerBell; b != nil && b.acquire() {
		ring(b.fd)
		b.release()
	}
}

// bellWaiter is a sleeper in line for the turn to read the doorbell.
type bellWaiter struct {
	prev, next *bellWaiter
	turn       chan struct{} // closed when the turn passes to it
	given      bool          // the turn passed to it; under bellMu
}

// sleepOnBell puts the caller to sleep on c until gen is closed (a
// wake-up), c is closed, ctx ends or deadline passes: as the doorbell's
// reader if nobody reads it, otherwise in line for the turn.
func (c *CQ) sleepOnBell(ctx context.Context, deadline time.Time, gen <-chan struct{}) error {
	d := c.dev
	d.bellMu.Lock()
	if !d.reading && !d.bellShut {
		d.reading = true
		d.bellMu.Unlock()
		return c.readBell(ctx, deadline, gen)
	}
	var w *bellWaiter
	var turn chan struct{}
	if !d.bellShut {
		w = &bellWaiter{turn: make(chan struct{})}
		d.enqueueLocked(w)
		turn = w.turn
	}
	d.bellMu.Unlock()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-gen:
	case <-c.done:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = os.ErrDeadlineExceeded
	case <-turn:
		return c.readBell(ctx, deadline, gen)
	}
	if w != nil {
		d.bellMu.Lock()
		if w.given {
			d.passTurnLocked() // the turn came as we leave: pass it on
		} else {
			d.dequeueLocked(w)
		}
		d.bellMu.Unlock()
	}
	return err
}

// readBell reads the doorbell, for the peer's wake-ups of every CQ, until
// c's own wake-up (or its end, ctx's or the deadline), then passes the
// turn on. The caller holds the turn.
func (c *CQ) readBell(ctx context.Context, deadline time.Time, gen <-chan struct{}) error {
	d := c.dev
	d.bellMu.Lock()
	d.readToken++
	tok := d.readToken
	d.readerCQ = c
	d.bell.SetReadDeadline(deadline)
	d.bellMu.Unlock()
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { d.interruptReader(tok, nil) })
	}
	err := c.readBellLoop(ctx, deadline, gen, tok)
	if stop != nil {
		stop()
	}
	d.bellMu.Lock()
	d.readerCQ = nil
	d.readToken++ // late interrupts miss the next reader
	d.passTurnLocked()
	d.bellMu.Unlock()
	return err
}

func (c *CQ) readBellLoop(ctx context.Context, deadline time.Time, gen <-chan struct{}, tok uint64) error {
	d := c.dev
	armed := u64(d.arena, offBell)
	var b [8]byte
	var woken []*CQ
	// woke takes the marks, wakes the CQs and says whether c is among them
	// (or closed).
	woke := func() bool {
		woken = d.takeWakes(woken[:0])
		for _, x := range woken {
			if x == c {
				x.wake() // the reader, which looks next
			} else {
				x.wakeLocal()
			}
		}
		clear(woken)
		select {
		case <-gen:
			return true
		case <-c.done:
			return true
		default:
			return false
		}
	}
	for {
		if woke() {
			return nil // the bell word stays as it is: clear after a ring
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if armed.Load() == 0 {
			// Set the bell word (the peer took it to ring, or it was
			// never set), then take again: a mark made before it was set
			// did not ring, one made after it rings.
			armed.Store(1)
			if woke() {
				return nil
			}
		}
		_, err := d.bell.Read(b[:])
		switch {
		case err == nil:
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return nil // the doorbell closed: the channel ended
		case !deadline.IsZero() && !time.Now().Before(deadline):
			return os.ErrDeadlineExceeded
		default: // interrupted: the checks above say why
			d.bellMu.Lock()
			if d.readToken == tok {
				d.bell.SetReadDeadline(deadline)
			}
			d.bellMu.Unlock()
		}
	}
}

// interruptReader ends the current read of the doorbell if the reader is
// tok (not zero) or sleeps on c (not nil), so that it looks at why.
func (d *Device) interruptReader(tok uint64, c *CQ) {
	d.bellMu.Lock()
	if d.readerCQ != nil && (tok != 0 && d.readToken == tok || c != nil && d.readerCQ == c) {
		d.bell.SetReadDeadline(time.Unix(1, 0))
	}
	d.bellMu.Unlock()
}

// passTurnLocked passes the turn to read the doorbell to the first
// sleeper in line, if any. The caller holds bellMu and the turn.
func (d *Device) passTurnLocked() {
	w := d.waitHead
	if w == nil || d.bellShut {
		d.reading = false
		return
	}
	d.dequeueLocked(w)
	w.given = true
	close(w.turn)
}

func (d *Device) enqueueLocked(w *bellWaiter) {
	w.prev = d.waitTail
	if d.waitTail != nil {
		d.waitTail.next = w
	} else {
		d.waitHead = w
	}
	d.waitTail = w
}

func (d *Device) dequeueLocked(w *bellWaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		d.waitHead = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		d.waitTail = w.prev
	}
	w.prev, w.next = nil, nil
}

// takeWakes takes the marks the peer set in the wake bitmap, once each
// word, and appends the CQs they name. The peer writes these words: a
// mark beyond the bitmap or for a CQ not in use is ignored.
func (d *Device) takeWakes(out []*CQ) []*CQ {
	nw := wakeWords(d.maxQPs)
	base := wakeOffset(d.maxQPs)
	var marks [256]int // CQ indexes marked, looked up in batches
	n := 0
	for s := range wakeSumWords(d.maxQPs) {
		sw := u64(d.arena, offWakeSum+8*s)
		if sw.Load() == 0 {
			continue
		}
		for sb := sw.Swap(0); sb != 0; sb &= sb - 1 {
			w := s*64 + bits.TrailingZeros64(sb)
			if w >= nw {
				continue // garbage: no such word
			}
			for wb := u64(d.arena, base+8*w).Swap(0); wb != 0; wb &= wb - 1 {
				if n == len(marks) {
					out = d.lookupCQs(out, marks[:n])
					n = 0
				}
				marks[n] = w*64 + bits.TrailingZeros64(wb)
				n++
			}
		}
	}
	return d.lookupCQs(out, marks[:n])
}

// lookupCQs appends the CQs in use at indexes idx.
func (d *Device) lookupCQs(out []*CQ, idx []int) []*CQ {
	if len(idx) == 0 {
		return out
	}
	d.mu.Lock()
	for _, i := range idx {
		if i < len(d.cqIdx) && d.cqIdx[i] != nil {
			out = append(out, d.cqIdx[i])
		}
	}
	d.mu.Unlock()
	return out
}

// newBell makes this side's doorbell: an eventfd read through the
// netpoller. It returns the file and its descriptor (to send).
func newBell() (*os.File, int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, -1, fmt.Errorf("shm: doorbell: %w", err)
	}
	return os.NewFile(uintptr(fd), "shm-doorbell"), fd, nil
}
