//go:build linux

package timerfd

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// Timer is a one-shot timer, like time.Timer, that fires within tens of
// microseconds of its time even when the process is idle. A goroutine of
// its own waits on the timerfd and signals C; Reset and Stop are one
// system call each and never block.
type Timer struct {
	// C receives a value when the timer fires. It holds one: expiries
	// that come while it is full are merged.
	C <-chan struct{}

	c    chan struct{}
	f    *os.File
	rc   syscall.RawConn
	done chan struct{}
}

// NewTimer creates a stopped Timer.
func NewTimer() (*Timer, error) {
	f, rc, err := create()
	if err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	t := &Timer{C: c, c: c, f: f, rc: rc, done: make(chan struct{})}
	go t.wait()
	return t, nil
}

// wait signals C at each expiry until the timer is closed.
func (t *Timer) wait() {
	defer close(t.done)
	var b [8]byte
	for {
		if _, err := t.f.Read(b[:]); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			// EAGAIN cannot reach here (the netpoller waits for it); any
			// other error would repeat, so the timer stops firing.
			return
		}
		select {
		case t.c <- struct{}{}:
		default:
		}
	}
}

// Reset makes the timer fire once, after d (at least 1 ns), replacing any
// earlier setting.
func (t *Timer) Reset(d time.Duration) error { return t.set(max(d, 1)) }

// Stop keeps the timer from firing until the next Reset. A value already
// in C stays there.
func (t *Timer) Stop() error { return t.set(0) }

func (t *Timer) set(d time.Duration) error { return settime(t.rc, d) }

// Close releases the timer and waits for its goroutine to end.
func (t *Timer) Close() error {
	err := t.f.Close()
	<-t.done
	return err
}
