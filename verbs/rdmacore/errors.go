//go:build rdmacore

package rdmacore

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rsock-go/rsock/verbs"
)

// callErr describes a failed libibverbs call. It wraps the error number
// and, where one matches, the verbs error (EINVAL: ErrInvalidArgument,
// ENOMEM on a post: ErrQueueFull, EBUSY: ErrBusy), so callers test it
// with errors.Is either way.
func callErr(call string, errno syscall.Errno) error {
	if errno == 0 {
		errno = syscall.EIO // the call failed without saying why
	}
	var kind error
	switch errno {
	case syscall.EINVAL:
		kind = verbs.ErrInvalidArgument
	case syscall.EBUSY:
		kind = verbs.ErrBusy
	case syscall.ENODEV, syscall.ENOSYS:
		kind = verbs.ErrNoDevice
	}
	if kind != nil {
		return fmt.Errorf("rdmacore: %s: %w (%w)", call, kind, errno)
	}
	return fmt.Errorf("rdmacore: %s: %w", call, errno)
}

// errnoOf turns the error cgo returns next to a result into an errno.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
