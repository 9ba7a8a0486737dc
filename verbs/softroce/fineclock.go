//go:build linux

package softroce

import (
	"sync"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/internal/timerfd"
)

// fineClock wakes a device's QPs at their near deadlines (the pacer's
// next packet, a held ACK) to within tens of microseconds. A device has
// one only with Config.FineClock.
//
// Each QP's own timer is a runtime timer, and the runtime wakes an idle
// process about a millisecond late: with nothing else to run it waits in
// epoll with a timeout in whole milliseconds, so a 50 µs wait took 1.07
// ms and a 200 µs one 0.9 ms on the machine this was written on. The
// pacer's waits are tens to hundreds of µs: at that lateness a bucket of
// less than a millisecond lost credit and with it rate (pacer.go). A
// held ACK (Config.AckDelay) went out 1 ms late instead of 200 µs, and
// lengthened the round trips the controller saw.
//
// One goroutine per device waits on a timerfd (through the netpoller,
// which wakes on it at once) for the earliest deadline; it runs each QP
// whose deadline has come as the QP's timer would. QPs add deadlines
// under their own lock without a system call: a deadline earlier than
// the one armed kicks the goroutine through a channel, and the goroutine
// re-arms the timerfd. Deadlines further away than fineHorizon stay on
// the QP's runtime timer, whose lateness is small beside them.
type fineClock struct {
	mu      sync.Mutex
	waiting deadlines // the QPs' earliest deadlines, soonest first
	armed   int64     // the deadline the timerfd is set for; 0 none
	runs    uint64    // QPs run at their deadlines, for tests

	timer *timerfd.Timer
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// fineHorizon is how near a deadline must be for the fine clock to take
// it.
const fineHorizon = int64(2 * time.Millisecond)

// newFineClock starts a device's fine clock; nil (QPs then use their
// runtime timers alone) if the system gives no timerfd.
func newFineClock() *fineClock {
	t, err := timerfd.NewTimer()
	if err != nil {
		return nil
	}
	c := &fineClock{
		timer: t,
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go c.run()
	return c
}

// schedule makes the clock run q's timer at at, or earlier if q already
// waits for an earlier time. The caller holds q.mu.
func (c *fineClock) schedule(q *QP, at int64) {
	c.mu.Lock()
	if !c.waiting.set(q, at) {
		c.mu.Unlock()
		return
	}
	early := c.armed == 0 || at < c.armed
	c.mu.Unlock()
	if early {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// run waits for the earliest deadline, runs the QPs whose deadlines have
// come, and re-arms, until close.
func (c *fineClock) run() {
	defer close(c.done)
	var due []*QP
	for {
		select {
		case <-c.kick:
		case <-c.timer.C:
		case <-c.stop:
			return
		}
		now := nanotime()
		c.mu.Lock()
		for len(c.waiting) > 0 && c.waiting[0].at <= now {
			due = append(due, c.waiting.pop())
		}
		c.runs += uint64(len(due))
		next := int64(0)
		if len(c.waiting) > 0 {
			next = c.waiting[0].at
		}
		c.armed = next
		c.mu.Unlock()
		if next != 0 {
			c.timer.Reset(time.Duration(next - now))
		}
		// One QP runs here; several each in a goroutine of their own, as
		// their runtime timers would, so that one QP's send does not hold
		// up the others' deadlines.
		if len(due) == 1 {
			due[0].onFineClock()
		} else {
			for _, q := range due {
				go q.onFineClock()
			}
		}
		clear(due)
		due = due[:0]
	}
}

// close stops the clock and waits for its goroutine.
func (c *fineClock) close() {
	close(c.stop)
	<-c.done
	c.timer.Close()
}

// deadlines is a binary min-heap of QPs by deadline; each QP is in it at
// most once, at the index its clockIdx holds (1-based, 0 when absent).
type deadlines []deadline

type deadline struct {
	at int64
	q  *QP
}

// set makes q's deadline at, if q is absent or waits for later; it
// reports whether it changed anything.
func (h *deadlines) set(q *QP, at int64) bool {
	if i := q.clockIdx - 1; i >= 0 {
		if (*h)[i].at <= at {
			return false
		}
		(*h)[i].at = at
		h.up(i)
		return true
	}
	*h = append(*h, deadline{at, q})
	q.clockIdx = len(*h)
	h.up(len(*h) - 1)
	return true
}

// pop removes and returns the QP with the soonest deadline.
func (h *deadlines) pop() *QP {
	s := *h
	q := s[0].q
	last := len(s) - 1
	s.swap(0, last)
	s[last] = deadline{}
	*h = s[:last]
	h.down(0)
	q.clockIdx = 0
	return q
}

func (h deadlines) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].q.clockIdx = i + 1
	h[j].q.clockIdx = j + 1
}

func (h deadlines) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].at <= h[i].at {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlines) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(h) && h[l].at < h[m].at {
			m = l
		}
		if r := l + 1; r < len(h) && h[r].at < h[m].at {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}
