package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AllocBuffer returns n bytes of zeroed, page-aligned memory outside the Go
// heap (an anonymous private mmap), suitable for RegMR: it never moves and
// the garbage collector never frees it. Release it with FreeBuffer after
// every MR over it is closed.
func AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: buffer size %d: %w", n, ErrInvalidArgument)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("verbs: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

// FreeBuffer unmaps a buffer from AllocBuffer.
func FreeBuffer(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b)
}
