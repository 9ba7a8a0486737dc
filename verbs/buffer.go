package verbs

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// buffers records the live AllocBuffer mappings (start address → length),
// so that providers that remap registered memory (verbs/shm shares it
// with a peer process) can tell such memory from the Go heap.
var buffers struct {
	sync.Mutex
	m map[uintptr]int
}

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
	buffers.Lock()
	if buffers.m == nil {
		buffers.m = make(map[uintptr]int)
	}
	buffers.m[uintptr(unsafe.Pointer(&b[0]))] = len(b)
	buffers.Unlock()
	return b, nil
}

// FreeBuffer unmaps a buffer from AllocBuffer.
func FreeBuffer(b []byte) error {
	if b == nil {
		return nil
	}
	if len(b) > 0 {
		buffers.Lock()
		delete(buffers.m, uintptr(unsafe.Pointer(&b[0])))
		buffers.Unlock()
	}
	return unix.Munmap(b)
}

// BufferSpan returns the start address and length of the live
// AllocBuffer allocation that holds all of b, and false when b is empty
// or is not inside one (Go heap memory, say).
func BufferSpan(b []byte) (start uintptr, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	buffers.Lock()
	defer buffers.Unlock()
	for s, l := range buffers.m {
		if p >= s && p-s <= uintptr(l) && uintptr(len(b)) <= uintptr(l)-(p-s) {
			return s, l, true
		}
	}
	return 0, 0, false
}
