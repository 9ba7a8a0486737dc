//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// CQ is a completion queue. Completions of this process's own requests
// wait in a local queue; arrivals from the peer wait in the inbound rings
// of the queue pairs it serves, and Poll takes them from there. A waiter
// sleeps on the CQ's eventfd, after setting its sleeping flag in the
// arena, where the peer looks after it publishes.
type CQ struct {
	dev  *Device
	idx  int
	flag *atomic.Uint32 // in our arena: the peer rings only when set
	efd  *os.File       // the doorbell, read through the netpoller
	efdN int

	mu      sync.Mutex
	ring    []verbs.WC
	head, n int
	overrun bool
	closed  bool
	recvQPs []*QP // queue pairs whose arrivals complete here
	sendQPs []*QP
	pushes  uint64 // completions added, for Notify

	spin      spinPolicy // how long a wait polls before it sleeps
	kicks     atomic.Uint64
	sleepersA atomic.Int32 // sleepers, for Kick's look without the lock

	waitMu   sync.Mutex
	sleepers int
	reading  bool          // a waiter reads the eventfd; the others wait on gen
	gen      chan struct{} // closed when the reader leaves
	token    uint64        // identifies the current reader for interrupts

	notifyOnce sync.Once
	notify     chan struct{}
	done       chan struct{}
}

var (
	_ verbs.CQ         = (*CQ)(nil)
	_ verbs.KickWaiter = (*CQ)(nil)
)

// CreateCQ creates a completion queue and announces its doorbell.
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth < 1 || depth > 1<<20 {
		return nil, fmt.Errorf("shm: CQ depth %d: %w", depth, verbs.ErrInvalidArgument)
	}
	d.mu.Lock()
	if d.closed || d.dead != nil {
		d.mu.Unlock()
		return nil, verbs.ErrClosed
	}
	if len(d.cqFree) == 0 {
		d.mu.Unlock()
		return nil, fmt.Errorf("shm: %d completion queues in use: %w", d.maxQPs, verbs.ErrQueueFull)
	}
	idx := d.cqFree[len(d.cqFree)-1]
	d.cqFree = d.cqFree[:len(d.cqFree)-1]
	d.mu.Unlock()
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err == nil {
		err = d.send(&msg{typ: msgCQNew, a: uint32(idx)}, fd)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		d.mu.Lock()
		d.cqFree = append(d.cqFree, idx)
		d.mu.Unlock()
		return nil, fmt.Errorf("shm: create CQ: %w", err)
	}
	c := &CQ{dev: d, idx: idx, flag: u32(d.arena, cqTableOff+idx*cqWordSize), efd: os.NewFile(uintptr(fd), "shm-doorbell"),
		efdN: fd, ring: make([]verbs.WC, depth), gen: make(chan struct{}), done: make(chan struct{})}
	c.flag.Store(0)
	d.mu.Lock()
	d.cqs[c] = struct{}{}
	d.mu.Unlock()
	return c, nil
}

// push adds a local completion; a full queue records an overrun. It
// wakes a sleeping waiter of this process.
func (c *CQ) push(wc *verbs.WC) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.n == len(c.ring) {
		c.overrun = true
	} else {
		c.ring[(c.head+c.n)%len(c.ring)] = *wc
		c.n++
		c.pushes++
	}
	c.mu.Unlock()
	c.wakeLocal()
}

// room is how many completions the local queue can take now.
func (c *CQ) room() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ring) - c.n
}

// wakeLocal rings our own doorbell when a waiter sleeps on it.
func (c *CQ) wakeLocal() {
	c.waitMu.Lock()
	s := c.sleepers
	c.waitMu.Unlock()
	if s > 0 {
		ring(c.efdN)
	}
}

func (c *CQ) queues() (recv, send []*QP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recvQPs, c.sendQPs
}

// Poll moves up to len(wcs) completions into wcs: first it takes the
// arrivals waiting in its queue pairs' inbound rings and moves stalled
// sends on.
func (c *CQ) Poll(wcs []verbs.WC) (int, error) {
	recv, send := c.queues()
	for _, q := range send {
		q.progress()
	}
	for _, q := range recv {
		q.harvest()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, verbs.ErrClosed
	}
	k := 0
	for k < len(wcs) && c.n > 0 {
		wcs[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	if c.overrun {
		return k, verbs.ErrCQOverrun
	}
	return k, nil
}

// ready reports whether Poll would return something.
func (c *CQ) ready() bool {
	c.mu.Lock()
	n, closed := c.n, c.closed
	recv, send := c.recvQPs, c.sendQPs
	c.mu.Unlock()
	if n > 0 || closed {
		return true
	}
	for _, q := range recv {
		if q.arrivals() {
			return true
		}
	}
	for _, q := range send {
		q.progress()
	}
	c.mu.Lock()
	n = c.n
	c.mu.Unlock()
	return n > 0
}

// Wait blocks until Poll would return a completion, ctx ends, or the CQ
// is closed. It polls for as long as its spin policy says, then sets the sleeping flag, looks again
// and sleeps on the doorbell: the peer rings it only when the flag is set.
func (c *CQ) Wait(ctx context.Context) error {
	return c.waitFor(ctx, time.Time{}, c.ready)
}

// Kicks returns the number of Kick calls so far.
func (c *CQ) Kicks() uint64 { return c.kicks.Load() }

// Kick wakes every goroutine in WaitKick: it counts, and rings our own
// doorbell only if someone sleeps.
func (c *CQ) Kick() {
	c.kicks.Add(1)
	if c.sleepersA.Load() > 0 {
		ring(c.efdN)
	}
}

// WaitKick waits in the calling goroutine until the CQ may hold a
// completion, Kick was called since Kicks returned seen, or deadline
// passes (os.ErrDeadlineExceeded).
func (c *CQ) WaitKick(seen uint64, deadline time.Time) error {
	return c.waitFor(context.Background(), deadline, func() bool { return c.kicks.Load() != seen || c.ready() })
}

func (c *CQ) waitFor(ctx context.Context, deadline time.Time, ready func() bool) error {
	start := time.Now()
	budget := c.spin.Begin()
	polling, slept := true, false
	alone := runtime.GOMAXPROCS(0) == 1
	for i := 0; ; i++ {
		if c.isClosed() {
			return verbs.ErrClosed
		}
		if ready() {
			c.spin.End(budget, time.Since(start), slept)
			return nil
		}
		if polling {
			// Look at the clock and the context only now and then: a
			// poll takes tens of nanoseconds.
			if i%8 != 7 {
				continue
			}
			now := time.Now()
			if now.Sub(start) < budget && (deadline.IsZero() || now.Before(deadline)) && ctx.Err() == nil {
				// With one P, what we wait for may need a goroutine of
				// this process (gRPC's writer, say): let it run. With
				// more, Gosched would wake an idle P's thread, which
				// costs more than the poll saves; they run elsewhere.
				if alone && i%64 == 63 {
					runtime.Gosched()
				}
				continue
			}
			polling = false
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return os.ErrDeadlineExceeded
		}
		c.enterSleep()
		if ready() {
			c.leaveSleep()
			continue
		}
		slept = true
		err := c.sleep(ctx, deadline)
		c.leaveSleep()
		if err != nil {
			return err
		}
	}
}

func (c *CQ) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *CQ) enterSleep() {
	c.waitMu.Lock()
	c.sleepers++
	c.sleepersA.Add(1)
	c.flag.Store(1)
	c.waitMu.Unlock()
}

func (c *CQ) leaveSleep() {
	c.waitMu.Lock()
	c.sleepers--
	c.sleepersA.Add(-1)
	if c.sleepers == 0 {
		c.flag.Store(0)
	}
	c.waitMu.Unlock()
}

// sleep waits for the doorbell. One waiter reads the eventfd through the
// netpoller; others wait for it to leave, then look again.
func (c *CQ) sleep(ctx context.Context, deadline time.Time) error {
	c.waitMu.Lock()
	if c.reading {
		gen := c.gen
		c.waitMu.Unlock()
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-gen:
			return nil
		case <-c.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return os.ErrDeadlineExceeded
		}
	}
	c.reading = true
	c.token++
	token := c.token
	c.efd.SetReadDeadline(deadline)
	c.waitMu.Unlock()
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			c.waitMu.Lock()
			if c.reading && c.token == token {
				c.efd.SetReadDeadline(time.Unix(1, 0))
			}
			c.waitMu.Unlock()
		})
	}
	var b [8]byte
	_, err := c.efd.Read(b[:])
	if stop != nil {
		stop()
	}
	c.waitMu.Lock()
	c.reading = false
	close(c.gen)
	c.gen = make(chan struct{})
	c.waitMu.Unlock()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if c.isClosed() {
			return nil
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return os.ErrDeadlineExceeded
		}
		return fmt.Errorf("shm: doorbell: %w", err)
	}
	return nil
}

// Notify returns a channel that receives a token after completions are
// added. The first call starts a goroutine that waits for them (a
// hand-off; rsock waits with Wait instead).
func (c *CQ) Notify() <-chan struct{} {
	c.notifyOnce.Do(func() {
		c.notify = make(chan struct{}, 1)
		go c.notifier()
	})
	return c.notify
}

// notifier sends a token whenever the CQ gains completions.
func (c *CQ) notifier() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.done
		cancel()
	}()
	last := c.arrivalCount()
	for {
		err := c.waitFor(ctx, time.Time{}, func() bool {
			c.progressSends()
			return c.arrivalCount() != last
		})
		if err != nil {
			return
		}
		last = c.arrivalCount()
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

func (c *CQ) progressSends() {
	_, send := c.queues()
	for _, q := range send {
		q.progress()
	}
}

// arrivalCount changes whenever a completion is added or arrives.
func (c *CQ) arrivalCount() uint64 {
	c.mu.Lock()
	n := c.pushes
	recv := c.recvQPs
	c.mu.Unlock()
	for _, q := range recv {
		n += q.published()
	}
	return n
}

// Close destroys the CQ. It is idempotent.
func (c *CQ) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if len(c.recvQPs)+len(c.sendQPs) > 0 {
		c.mu.Unlock()
		return verbs.ErrBusy
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	ring(c.efdN) // a reader leaves
	d := c.dev
	if d.deadErr() == nil {
		d.send(&msg{typ: msgCQGone, a: uint32(c.idx)}, -1)
	}
	c.waitMu.Lock()
	for c.reading {
		gen := c.gen
		c.waitMu.Unlock()
		<-gen
		c.waitMu.Lock()
	}
	c.waitMu.Unlock()
	err := c.efd.Close()
	d.mu.Lock()
	delete(d.cqs, c)
	d.cqFree = append(d.cqFree, c.idx)
	d.mu.Unlock()
	return err
}
