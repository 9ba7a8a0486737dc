//go:build linux

package memif

import (
	"testing"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// inside reports whether b (with its capacity) lies within mem.
func inside(b, mem []byte) bool {
	if len(b) == 0 {
		return true
	}
	s := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= s && p+uintptr(cap(b)) <= s+uintptr(len(mem))
}
