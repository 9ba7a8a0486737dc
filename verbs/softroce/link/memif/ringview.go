//go:build linux

package memif

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Ring layout. A ring is a 128-byte header followed by 1<<log2 descriptors:
//
//	cache line 0: bytes 0-3 cookie, 4-5 flags, 6-7 head
//	cache line 1: bytes 64-65 tail
//	bytes 128-:   descriptors, DescLen bytes each
//
// The head and tail are free-running 16-bit counters; slot i of a ring of
// size n is descriptor i&(n-1). On a client-to-server ring the client
// advances the head as it fills slots and the server advances the tail as
// it consumes them. On a server-to-client ring the client advances the
// head as it offers empty buffers and the server advances the tail as it
// fills them.
const (
	// RingHeaderLen is the size of the ring header, descriptors follow it.
	RingHeaderLen = 128
	// Cookie marks an initialized ring header.
	Cookie = 0x3E31F20
	// RingMaskInt is the ring flag by which a receiver asks the sender not
	// to signal the ring's interrupt eventfd (it polls).
	RingMaskInt = 1
	// MaxLog2RingSize is the largest ring, 1<<14 descriptors (as DPDK).
	MaxLog2RingSize = 14
	// Version is the memif protocol version spoken, 2.0.
	Version = 2<<8 | 0

	ringWordHead = 4  // 32-bit word holding flags (low half) and head (high half)
	ringWordTail = 64 // 32-bit word holding tail (low half)
	casTries     = 1000
)

// RingLen returns the size in bytes of a ring of 1<<log2 descriptors.
func RingLen(log2 uint8) int { return RingHeaderLen + DescLen<<log2 }

// Ring is a view of a ring header and its descriptors, RingLen(log2)
// bytes, usually in shared memory. The flags, head and tail are accessed
// atomically (as 32-bit words, so the view must start 4-byte aligned);
// the other side may change any byte at any time.
type Ring []byte

func (r Ring) word(off int) *uint32 {
	_ = r[off+3]
	return (*uint32)(unsafe.Pointer(&r[off]))
}

// Init writes a fresh header: the cookie, no flags, head and tail 0.
func (r Ring) Init() {
	clear(r[:RingHeaderLen])
	binary.LittleEndian.PutUint32(r[0:], Cookie)
}

// Cookie returns the cookie field.
func (r Ring) Cookie() uint32 { return atomic.LoadUint32(r.word(0)) }

// Flags returns the flags field.
func (r Ring) Flags() uint16 { return uint16(atomic.LoadUint32(r.word(ringWordHead))) }

// Head returns the head counter (load-acquire).
func (r Ring) Head() uint16 { return uint16(atomic.LoadUint32(r.word(ringWordHead)) >> 16) }

// Tail returns the tail counter (load-acquire).
func (r Ring) Tail() uint16 { return uint16(atomic.LoadUint32(r.word(ringWordTail))) }

// update replaces the bits of the word at off selected by mask with v,
// atomically and as a full barrier, leaving the other bits as they are
// (the peer may be writing them).
func (r Ring) update(off int, mask, v uint32) {
	p := r.word(off)
	for range casTries {
		old := atomic.LoadUint32(p)
		if atomic.CompareAndSwapUint32(p, old, old&^mask|v&mask) {
			return
		}
	}
	// A peer rewriting the word without pause: ours wins.
	atomic.StoreUint32(p, atomic.LoadUint32(p)&^mask|v&mask)
}

// StoreHead sets the head counter (store-release, full barrier).
func (r Ring) StoreHead(v uint16) { r.update(ringWordHead, 0xffff0000, uint32(v)<<16) }

// StoreTail sets the tail counter (store-release, full barrier).
func (r Ring) StoreTail(v uint16) { r.update(ringWordTail, 0xffff, uint32(v)) }

// SetFlags sets the flags field (full barrier).
func (r Ring) SetFlags(v uint16) { r.update(ringWordHead, 0xffff, uint32(v)) }

// Desc returns the view of descriptor slot i (i < ring size).
func (r Ring) Desc(i int) Desc {
	o := RingHeaderLen + i*DescLen
	return Desc(r[o : o+DescLen : o+DescLen])
}

// LoadDesc copies descriptor slot i out of the ring, so that its fields
// can be checked and used without the peer changing them in between.
func (r Ring) LoadDesc(i int) (d [DescLen]byte) {
	copy(d[:], r.Desc(i))
	return d
}
