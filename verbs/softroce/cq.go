package softroce

import (
	"context"
	"sync"

	"github.com/rsock-go/rsock/verbs"
)

// CQ is a soft-RoCE completion queue: a bounded ring of completions.
type CQ struct {
	dev *Device

	mu      sync.Mutex
	ring    []verbs.WC
	head    int // index of the oldest completion
	n       int // completions held
	overrun bool
	closed  bool

	notify chan struct{} // holds a token while completions may be waiting
	done   chan struct{} // closed by close
}

var _ verbs.CQ = (*CQ)(nil)

func newCQ(d *Device, depth int) *CQ {
	return &CQ{
		dev:    d,
		ring:   make([]verbs.WC, depth),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

// push adds a completion. A full queue loses it and records an overrun,
// which Poll reports.
func (c *CQ) push(wc *verbs.WC) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.n == len(c.ring) {
		c.overrun = true
		c.mu.Unlock()
		c.dev.stats.add(cCQOverruns, 1)
		return
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
		c.dev.signalled.Store(true)
	default:
	}
}

// Poll moves up to len(wcs) completions into wcs.
func (c *CQ) Poll(wcs []verbs.WC) (int, error) {
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

// Wait blocks until the CQ holds a completion, ctx is done, or the CQ is
// closed.
func (c *CQ) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, closed := c.n, c.closed
		c.mu.Unlock()
		if closed {
			return verbs.ErrClosed
		}
		if n > 0 {
			return nil
		}
		select {
		case <-c.notify:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Notify returns the channel that receives a token when completions are
// added.
func (c *CQ) Notify() <-chan struct{} { return c.notify }

// Close destroys the CQ. It is idempotent.
func (c *CQ) Close() error {
	d := c.dev
	d.objMu.Lock()
	delete(d.cqs, c)
	d.objMu.Unlock()
	c.close()
	return nil
}

func (c *CQ) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
}
