//go:build linux

// Package eventfd waits for and signals Linux eventfds through Go's
// netpoller, so that a waiting receiver costs no CPU: the interrupts of
// memif rings, and the rx interrupts of DPDK queues.
package eventfd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FD is an eventfd: the sender writes to it, the receiver waits for it to
// become readable.
type FD struct {
	f  *os.File
	rc syscall.RawConn
}

// New creates a nonblocking eventfd and returns its descriptor.
func New() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

// ErrNotEventFD reports a descriptor that is not an eventfd.
var ErrNotEventFD = errors.New("interrupt fd is not an eventfd")

// Open wraps fd, which must be an eventfd (a peer could pass any file),
// making it nonblocking. It takes ownership of fd.
func Open(fd int) (*FD, error) {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || link != "anon_inode:[eventfd]" {
		unix.Close(fd)
		return nil, fmt.Errorf("%w (%q)", ErrNotEventFD, link)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &FD{f: f, rc: rc}, nil
}

// Signal adds one to the counter, waking a waiting receiver. It never
// blocks.
func (e *FD) Signal() {
	one := [8]byte{1}
	e.rc.Write(func(fd uintptr) bool {
		unix.Write(int(fd), one[:])
		return true
	})
}

// Wait blocks until the counter is non-zero (and resets it), d passes
// (timedOut), or the eventfd is closed (os.ErrClosed).
func (e *FD) Wait(d time.Duration) (timedOut bool, err error) {
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

// Close closes the eventfd; a blocked Wait returns.
func (e *FD) Close() { e.f.Close() }
