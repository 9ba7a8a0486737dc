//go:build linux

package shm

import (
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The channel's doorbells: each side has one eventfd, passed to the peer
// once at setup, however many completion queues it has. A waiter that
// sleeps sets its CQ's sleeping flag; the peer, after it published to a
// queue pair of a flagged CQ, sets the CQ's bit in the wake bitmap of the
// sleeper's arena (and the bit of that word in the summary), then takes
// the sleeper's bell word and rings the eventfd only if the word was set.
// One goroutine per side (bellLoop, started with the channel) sets the
// bell word, takes the bitmap and wakes the CQs named there, and
// waits for the next ring through Go's netpoller. Completions of this
// process's own requests and Kick wake waiters through Go alone.

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
// marks the CQ in the wake bitmap and rings the peer's doorbell if the
// peer's doorbell goroutine waits for a ring.
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

// ringPeer rings the peer's doorbell if the peer's doorbell goroutine
// waits for a ring (its bell word is set); the first waker takes the
// word, so a burst rings once.
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

// bellLoop wakes the CQs the peer marked, until the channel ends (fail
// closes the doorbell, which ends the read). It sets the bell word before
// it takes the bitmap, so a mark made after the take finds the word set
// and rings.
func (d *Device) bellLoop() {
	defer close(d.bellDone)
	armed := u64(d.arena, offBell)
	var b [8]byte
	var woken []*CQ
	for {
		armed.Store(1)
		woken = d.takeWakes(woken[:0])
		for _, c := range woken {
			c.wakeLocal()
		}
		clear(woken)
		if _, err := d.bell.Read(b[:]); err != nil {
			return
		}
	}
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
