//go:build linux

// The sendmmsg and recvmmsg system call wrapper shared by Send and Recv,
// and the control-message memory of their argument vectors.

package udp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgCall is one sendmmsg or recvmmsg call on preallocated headers.
type mmsgCall struct {
	hs       []unix.Mmsghdr
	off, cnt int        // call argument: hs[off : off+cnt]
	n        int        // call result: messages transferred
	errno    unix.Errno // call result: error, or 0
}

// do makes the system call trap on fd, as a raw-connection callback: it
// reports false on EAGAIN, so the runtime waits for readiness and calls
// again.
func (c *mmsgCall) do(fd uintptr, trap uintptr) bool {
	for {
		r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&c.hs[c.off])), uintptr(c.cnt), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			c.n, c.errno = int(r), 0
		default:
			c.n, c.errno = 0, e
		}
		return true
	}
}

// alignedBytes returns n zero bytes aligned for a unix.Cmsghdr.
func alignedBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}
