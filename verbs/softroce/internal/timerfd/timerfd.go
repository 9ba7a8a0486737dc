//go:build linux

// Package timerfd sleeps for short times precisely: a Linux timerfd waited
// through Go's netpoller. time.Sleep of under a millisecond takes about a
// millisecond when the process has nothing else to run (the runtime then
// waits in epoll with a timeout in whole milliseconds); a timerfd wakes
// the sleeper within tens of microseconds.
package timerfd

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by Sleep once the Sleeper is closed.
var ErrClosed = errors.New("timerfd: sleeper closed")

// Sleeper sleeps one goroutine at a time; Wake may be called from any
// goroutine.
type Sleeper struct {
	f  *os.File
	rc syscall.RawConn
}

// New creates a Sleeper.
func New() (*Sleeper, error) {
	f, rc, err := create()
	if err != nil {
		return nil, err
	}
	return &Sleeper{f: f, rc: rc}, nil
}

// create opens a non-blocking timerfd on the monotonic clock, for the
// netpoller to wait on.
func create() (*os.File, syscall.RawConn, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("timerfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("timerfd: %w", err)
	}
	return f, rc, nil
}

// Sleep returns after d, or earlier after a Wake. It returns ErrClosed
// once the Sleeper is closed.
func (s *Sleeper) Sleep(d time.Duration) error {
	if err := s.arm(max(d, 1)); err != nil {
		return err
	}
	var b [8]byte
	if _, err := s.f.Read(b[:]); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("timerfd: %w", err)
	}
	return nil
}

// Wake ends the current (or the next) Sleep now.
func (s *Sleeper) Wake() { s.arm(1) }

// arm sets the timer to expire once, after d.
func (s *Sleeper) arm(d time.Duration) error { return settime(s.rc, d) }

// settime sets the timerfd behind rc to expire once, after d; 0 disarms
// it.
func settime(rc syscall.RawConn, d time.Duration) error {
	var err error
	cerr := rc.Control(func(fd uintptr) {
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
		err = unix.TimerfdSettime(int(fd), 0, &spec, nil)
	})
	switch {
	case cerr != nil:
		return ErrClosed
	case err != nil:
		return fmt.Errorf("timerfd: %w", err)
	}
	return nil
}

// Close releases the timer; a Sleep in progress returns ErrClosed.
func (s *Sleeper) Close() error { return s.f.Close() }
