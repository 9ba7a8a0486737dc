package memif

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// eventFD is a ring's interrupt: the sender writes to it, the receiver
// waits for it to become readable through Go's netpoller, so a waiting
// receiver costs no CPU.
type eventFD struct {
	f  *os.File
	rc syscall.RawConn
}

// newEventFD creates a nonblocking eventfd, as memif clients do for each
// ring.
func newEventFD() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memif: eventfd: %w", err)
	}
	return fd, nil
}

// errNotEventFD reports a ring interrupt descriptor that is not an eventfd.
var errNotEventFD = errors.New("memif: interrupt fd is not an eventfd")

// openEventFD wraps fd, which must be an eventfd (a peer could pass any
// file), making it nonblocking. It takes ownership of fd.
func openEventFD(fd int) (*eventFD, error) {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || link != "anon_inode:[eventfd]" {
		unix.Close(fd)
		return nil, fmt.Errorf("%w (%q)", errNotEventFD, link)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memif: eventfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memif-eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("memif: eventfd: %w", err)
	}
	return &eventFD{f: f, rc: rc}, nil
}

// signal adds one to the counter, waking a waiting receiver. It never
// blocks.
func (e *eventFD) signal() {
	one := [8]byte{1}
	e.rc.Write(func(fd uintptr) bool {
		unix.Write(int(fd), one[:])
		return true
	})
}

// wait blocks until the counter is non-zero (and resets it), d passes
// (timedOut), or the eventfd is closed (os.ErrClosed).
func (e *eventFD) wait(d time.Duration) (timedOut bool, err error) {
	if err := e.f.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false, err
	}
	var b [8]byte
	_, err = e.f.Read(b[:])
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return true, nil
	}
	return false, err
}

// close closes the eventfd; a blocked wait returns.
func (e *eventFD) close() { e.f.Close() }
