package rsock

import (
	"sync"
	"time"
)

// deadline is a settable point in time with a channel that is closed once
// it passes, for select-based waits. Setting it again while someone waits
// takes effect at once, as net.Conn deadlines do.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	at    time.Time     // the deadline; zero for none
	done  chan struct{} // closed when the deadline passed
}

func newDeadline() *deadline { return &deadline{done: make(chan struct{})} }

// set moves the deadline; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.done // the timer fired: wait for its close
	}
	d.timer = nil
	d.at = t
	closed := isClosed(d.done)
	if t.IsZero() {
		if closed {
			d.done = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.done = make(chan struct{})
		}
		done := d.done
		d.timer = time.AfterFunc(dur, func() { close(done) })
		return
	}
	if !closed {
		close(d.done)
	}
}

// when returns the deadline, the zero time for none.
func (d *deadline) when() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// wait returns the channel closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && d.timer.Stop() {
		d.timer = nil
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
