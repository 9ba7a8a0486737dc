//go:build linux

package shm

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// CQ is a completion queue. Completions of this process's own requests
// wait in a local queue; arrivals from the peer wait in the inbound rings
// of the queue pairs it serves, and Poll takes them from there. A waiter
// sets the CQ's sleeping flag in the arena, where the peer looks after it
// publishes, and sleeps on a Go channel, or reads the channel's doorbell
// in its turn (bell.go): the doorbell's reader closes it when the peer
// marks the CQ, and so do this process's completions and Kick.
type CQ struct {
	dev  *Device
	idx  int
	flag *atomic.Uint32 // in our arena: the peer wakes us only when set

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
	gen      chan struct{} // closed to wake the sleepers, then replaced
	retired  bool          // Close freed the flag's index: leave it alone

	notifyOnce sync.Once
	notify     chan struct{}
	done       chan struct{}
}

var (
	_ verbs.CQ         = (*CQ)(nil)
	_ verbs.KickWaiter = (*CQ)(nil)
)

// CreateCQ creates a completion queue: a sleeping flag in the arena, no
// descriptor and no message to the peer (the peer learns a CQ's index
// from the queue pairs that name it).
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth < 1 || depth > 1<<20 {
		return nil, fmt.Errorf("shm: CQ depth %d: %w", depth, verbs.ErrInvalidArgument)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.dead != nil {
		return nil, verbs.ErrClosed
	}
	if len(d.cqFree) == 0 {
		return nil, fmt.Errorf("shm: %d completion queues in use: %w", d.maxQPs, verbs.ErrQueueFull)
	}
	idx := d.cqFree[len(d.cqFree)-1]
	d.cqFree = d.cqFree[:len(d.cqFree)-1]
	c := &CQ{dev: d, idx: idx, flag: u32(d.arena, cqTableOff+idx*cqWordSize),
		ring: make([]verbs.WC, depth), gen: make(chan struct{}), done: make(chan struct{})}
	c.flag.Store(0)
	if idx >= len(d.cqIdx) {
		d.cqIdx = append(d.cqIdx, make([]*CQ, idx+1-len(d.cqIdx))...)
	}
	d.cqIdx[idx] = c
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

// wakeLocal wakes the waiters that sleep on the CQ, if any. A waiter
// counts itself in sleepersA before it looks at the CQ a last time, so
// one that missed what the caller added is counted here.
func (c *CQ) wakeLocal() {
	if c.wake() {
		c.dev.interruptReader(0, c) // one of them may be reading the doorbell
	}
}

// wake closes the sleepers' channel, if any sleep, and says whether it
// did.
func (c *CQ) wake() bool {
	if c.sleepersA.Load() == 0 {
		return false
	}
	c.waitMu.Lock()
	s := c.sleepers
	if s > 0 {
		close(c.gen)
		c.gen = make(chan struct{})
	}
	c.waitMu.Unlock()
	return s > 0
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
// is closed. It polls for as long as its spin policy says, then sets
// the sleeping flag, looks again and sleeps: the peer wakes it (through
// the channel's doorbell) only when the flag is set.
func (c *CQ) Wait(ctx context.Context) error {
	return c.waitFor(ctx, time.Time{}, c.ready)
}

// Kicks returns the number of Kick calls so far.
func (c *CQ) Kicks() uint64 { return c.kicks.Load() }

// Kick wakes every goroutine in WaitKick: it counts, and wakes the
// sleepers, if any, through Go (no system call).
func (c *CQ) Kick() {
	c.kicks.Add(1)
	c.wakeLocal()
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
		gen := c.enterSleep()
		if ready() {
			c.leaveSleep()
			continue
		}
		slept = true
		err := c.sleep(ctx, deadline, gen)
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

// enterSleep counts the caller as a sleeper and sets the sleeping flag
// (the peer looks at it after it publishes); the caller then looks once
// more before it sleeps on the channel returned, which any wake-up from
// now on closes.
func (c *CQ) enterSleep() <-chan struct{} {
	c.waitMu.Lock()
	c.sleepers++
	c.sleepersA.Add(1)
	if !c.retired {
		c.flag.Store(1)
	}
	gen := c.gen
	c.waitMu.Unlock()
	return gen
}

func (c *CQ) leaveSleep() {
	c.waitMu.Lock()
	c.sleepers--
	c.sleepersA.Add(-1)
	if c.sleepers == 0 && !c.retired {
		c.flag.Store(0)
	}
	c.waitMu.Unlock()
}

// sleep waits until gen is closed (a wake-up), the CQ is closed, ctx ends
// or deadline passes, reading the channel's doorbell in its turn
// (bell.go).
func (c *CQ) sleep(ctx context.Context, deadline time.Time, gen <-chan struct{}) error {
	return c.sleepOnBell(ctx, deadline, gen)
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
	close(c.done) // the sleepers leave
	c.mu.Unlock()
	c.dev.interruptReader(0, c)
	c.waitMu.Lock()
	c.retired = true // from now on the index may serve another CQ
	c.flag.Store(0)
	c.waitMu.Unlock()
	d := c.dev
	d.mu.Lock()
	d.cqIdx[c.idx] = nil
	d.cqFree = append(d.cqFree, c.idx)
	d.mu.Unlock()
	return nil
}
