// Package ring holds rsock's byte rings and their credit accounting.
//
// A stream has two rings: the receive ring, which the peer writes into with
// RDMA WRITE, and the send ring, from which this side's writes are sent.
// Positions in a ring are free-running 64-bit byte cursors; the byte at
// cursor c lives at offset c mod size. Sizes are powers of two, so a region
// of the ring is at most two contiguous spans (before and after the wrap).
//
// Credits are what lets a writer write: Producer tracks, on the writer's
// side, how many bytes of the peer's receive ring and how many of its
// receive work requests are free; Consumer tracks, on the reader's side,
// what arrived, what the application consumed, and when to tell the writer.
package ring

import (
	"errors"
	"fmt"
)

// Size limits of a ring.
const (
	MinSize = 4 << 10
	MaxSize = 64 << 20
)

// ErrSize reports a ring size that is not a power of two in [MinSize, MaxSize].
var ErrSize = errors.New("ring: size must be a power of two from 4 KiB to 64 MiB")

// CheckSize validates a ring size.
func CheckSize(size int) error {
	if size < MinSize || size > MaxSize || size&(size-1) != 0 {
		return fmt.Errorf("%w: %d", ErrSize, size)
	}
	return nil
}

// Span is a contiguous region of a ring: Len bytes at offset Off.
type Span struct {
	Off int
	Len int
}

// Spans splits the n bytes starting at cursor into at most two contiguous
// regions of a ring of the given size. The second has Len 0 when the
// region does not wrap. n must not exceed size.
func Spans(cursor uint64, n, size int) (first, second Span) {
	off := int(cursor & uint64(size-1))
	if off+n <= size {
		return Span{off, n}, Span{}
	}
	return Span{off, size - off}, Span{0, off + n - size}
}

// Ring is a byte ring over a buffer whose length is a power of two.
type Ring struct {
	buf []byte
}

// New wraps buf, whose length must be a valid ring size.
func New(buf []byte) (*Ring, error) {
	if err := CheckSize(len(buf)); err != nil {
		return nil, err
	}
	return &Ring{buf: buf}, nil
}

// Size is the ring's length in bytes.
func (r *Ring) Size() int { return len(r.buf) }

// Bytes returns the ring's buffer.
func (r *Ring) Bytes() []byte { return r.buf }

// Regions returns the n bytes starting at cursor as one or two slices of
// the ring (b is empty when the region does not wrap).
func (r *Ring) Regions(cursor uint64, n int) (a, b []byte) {
	s1, s2 := Spans(cursor, n, len(r.buf))
	return r.buf[s1.Off : s1.Off+s1.Len], r.buf[s2.Off : s2.Off+s2.Len]
}

// Write copies p into the ring at cursor, wrapping as needed.
func (r *Ring) Write(cursor uint64, p []byte) {
	a, b := r.Regions(cursor, len(p))
	n := copy(a, p)
	copy(b, p[n:])
}

// Read copies len(p) bytes from the ring at cursor into p.
func (r *Ring) Read(cursor uint64, p []byte) {
	a, b := r.Regions(cursor, len(p))
	n := copy(p, a)
	copy(p[n:], b)
}
