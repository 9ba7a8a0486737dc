//go:build linux

package memif

import (
	"errors"
	"fmt"
)

// ErrRing reports a ring whose shared state the peer made inconsistent:
// an index moved outside the ring, a descriptor pointing outside the
// regions, or a chain longer than the ring. The link fails with it.
var ErrRing = errors.New("memif: corrupt ring")

// maxChain bounds the descriptors of one frame, whatever the ring size.
const maxChain = 64

// txQueue sends frames on a ring. The client sends on its C2S ring, into
// buffers it owns (their place is fixed: slot i of the ring uses buffer i),
// and publishes with the head. The server sends on the S2C ring into the
// buffers the client offered (each slot names its buffer and capacity),
// and publishes with the tail. Only our own copy of the publishing index
// is trusted; the peer's index is checked against the ring size.
type txQueue struct {
	ring    Ring
	regs    []region
	size    uint16 // ring size; mask is size-1
	client  bool
	idx     uint16 // next slot to fill; our copy of head (client) or tail (server)
	bufSize uint32 // client: size of each buffer
	bufBase uint32 // client: offset of this ring's buffer 0 in region 0
}

// free returns how many slots may be filled now.
func (q *txQueue) free() (int, error) {
	if q.client {
		used := q.idx - q.ring.Tail()
		if used > q.size {
			return 0, fmt.Errorf("%w: tail is %d slots behind head, ring has %d", ErrRing, used, q.size)
		}
		return int(q.size - used), nil
	}
	n := q.ring.Head() - q.idx
	if n > q.size {
		return 0, fmt.Errorf("%w: head is %d slots ahead of tail, ring has %d", ErrRing, n, q.size)
	}
	return int(n), nil
}

// put copies the frame made of the pieces (in order, total bytes n) into
// the ring's next slots, chaining descriptors if it needs more than one
// buffer, using at most free slots. It returns the slots used, 0 if the
// frame does not fit now. It publishes nothing: see publish.
func (q *txQueue) put(pieces [][]byte, n int, free int) (int, error) {
	mask := q.size - 1
	slot := q.idx
	used := 0
	pi, po := 0, 0 // piece index and offset in it
	remaining := n
	for {
		if used == free || used == maxChain {
			return 0, nil
		}
		s := int(slot & mask)
		var buf []byte
		if q.client {
			off := q.bufBase + uint32(s)*q.bufSize
			buf = q.regs[0].mem[off : off+q.bufSize : off+q.bufSize]
		} else {
			raw := q.ring.LoadDesc(s)
			b, err := descBuffer(q.regs, &raw)
			if err != nil {
				return 0, fmt.Errorf("%w: slot %d: %v", ErrRing, s, err)
			}
			buf = b
		}
		w := 0
		for w < len(buf) && pi < len(pieces) {
			c := copy(buf[w:], pieces[pi][po:])
			w += c
			po += c
			if po == len(pieces[pi]) {
				pi, po = pi+1, 0
			}
		}
		remaining -= w
		var flags uint16
		if remaining > 0 {
			flags = DescNext
		}
		d := q.ring.Desc(s)
		if q.client {
			off := q.bufBase + uint32(s)*q.bufSize
			d.Encode(flags, 0, uint32(w), off, 0)
		} else {
			d.SetFlagsLength(flags, uint32(w))
		}
		slot++
		used++
		if remaining <= 0 {
			q.idx = slot
			return used, nil
		}
	}
}

// publish makes the filled slots visible to the receiver and reports
// whether the receiver asked to be interrupted.
func (q *txQueue) publish() (interrupt bool) {
	if q.client {
		q.ring.StoreHead(q.idx)
	} else {
		q.ring.StoreTail(q.idx)
	}
	return q.ring.Flags()&RingMaskInt == 0
}

// rxQueue receives frames from a ring. The server receives on the C2S ring
// (the client publishes with the head, the server releases with the
// tail). The client receives on the S2C ring: it offers its buffers by
// advancing the head, the server fills them and publishes with the tail.
type rxQueue struct {
	ring    Ring
	regs    []region
	size    uint16
	client  bool
	last    uint16 // next slot to consume
	offered uint16 // client: our copy of head
	bufSize uint32 // client
	bufBase uint32 // client
}

// refill offers every consumed buffer back to the sender (client only).
func (q *rxQueue) refill() {
	if !q.client {
		return
	}
	mask := q.size - 1
	for q.offered-q.last < q.size {
		s := uint32(q.offered & mask)
		q.ring.Desc(int(s)).Encode(0, 0, q.bufSize, q.bufBase+s*q.bufSize, 0)
		q.offered++
	}
	q.ring.StoreHead(q.offered)
}

// avail returns how many filled slots are waiting, from one snapshot of
// the peer's index, checked against what the peer may have filled.
func (q *rxQueue) avail() (int, error) {
	if q.client {
		n := q.ring.Tail() - q.last
		if limit := q.offered - q.last; n > limit {
			return 0, fmt.Errorf("%w: tail is %d slots ahead, only %d buffers offered", ErrRing, n, limit)
		}
		return int(n), nil
	}
	n := q.ring.Head() - q.last
	if n > q.size {
		return 0, fmt.Errorf("%w: head is %d slots ahead of tail, ring has %d", ErrRing, n, q.size)
	}
	return int(n), nil
}

// rxResult says what next found.
type rxResult int

const (
	rxFrame      rxResult = iota // a frame was copied into dst
	rxIncomplete                 // the slots end inside a chain: wait for more
	rxOversize                   // a frame longer than dst; skipped
)

// next copies the frame starting skip slots after the next unconsumed
// one into dst, reading at most avail slots from there, and returns its length and the slots it
// took. Every descriptor is copied out of the ring once and checked before
// its buffer is read. Slots are not released: see release.
func (q *rxQueue) next(dst []byte, skip, avail int) (n, slots int, res rxResult, err error) {
	mask := q.size - 1
	over := false
	for slots < avail {
		if slots == maxChain {
			return 0, 0, 0, fmt.Errorf("%w: descriptor chain longer than %d", ErrRing, maxChain)
		}
		s := int((q.last + uint16(skip+slots)) & mask)
		raw := q.ring.LoadDesc(s)
		buf, err := descBuffer(q.regs, &raw)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w: slot %d: %v", ErrRing, s, err)
		}
		slots++
		if !over && n+len(buf) <= len(dst) {
			n += copy(dst[n:], buf)
		} else {
			over = true
		}
		if Desc(raw[:]).Flags()&DescNext == 0 {
			if over {
				return 0, slots, rxOversize, nil
			}
			return n, slots, rxFrame, nil
		}
	}
	if skip == 0 && avail == int(q.size) {
		return 0, 0, 0, fmt.Errorf("%w: descriptor chain fills the whole ring", ErrRing)
	}
	return 0, 0, rxIncomplete, nil
}

// single returns the buffer of the frame starting skip slots after the
// next unconsumed one if that frame is one descriptor (ok false if it is
// chained). The descriptor is copied out of the ring once and checked, as
// next does; the slot is not released.
func (q *rxQueue) single(skip int) (buf []byte, ok bool, err error) {
	s := int((q.last + uint16(skip)) & (q.size - 1))
	raw := q.ring.LoadDesc(s)
	if Desc(raw[:]).Flags()&DescNext != 0 {
		return nil, false, nil
	}
	buf, err = descBuffer(q.regs, &raw)
	if err != nil {
		return nil, false, fmt.Errorf("%w: slot %d: %v", ErrRing, s, err)
	}
	return buf, true, nil
}

// release gives k consumed slots back to the sender.
//
// A server clears the flags of the client's descriptors it consumed
// first: DPDK's net_memif up to the fix "net/memif: fix descriptor Tx
// flags corruption" (DPDK commit f7a52200d4, 2026; Debian 12 ships 22.11
// without it) sends from a client without resetting the flags of a
// frame's first descriptor, so a NEXT flag left in a slot from the
// previous round of the ring would join two frames. A correct sender sets
// the flags of every descriptor it fills, so this changes nothing for it.
func (q *rxQueue) release(k int) {
	if k == 0 {
		return
	}
	if q.client {
		q.last += uint16(k)
		q.refill()
		return
	}
	mask := q.size - 1
	for i := range k {
		q.ring.Desc(int((q.last + uint16(i)) & mask)).SetFlags(0)
	}
	q.last += uint16(k)
	q.ring.StoreTail(q.last)
}

// armed sets or clears the receiver's interrupt mask: with on, the sender
// signals the eventfd after publishing.
func (q *rxQueue) arm(on bool) {
	if on {
		q.ring.SetFlags(q.ring.Flags() &^ RingMaskInt)
	} else {
		q.ring.SetFlags(q.ring.Flags() | RingMaskInt)
	}
}
