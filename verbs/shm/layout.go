//go:build linux

package shm

import (
	"sync/atomic"
	"unsafe"
)

// The arena is one sealed memfd per side of a channel, mapped by both:
//
//	0                 header page:
//	  0   magic, version (informational)
//	  64  bell          set to 1 by the owner's sleeper that reads its
//	                    doorbell, before it takes the bitmap; the peer
//	                    takes it (swap to 0) and rings the owner's eventfd
//	                    only if it was 1, so a burst of wake-ups rings once
//	  128 wake summary  wakeSumWords words: bit j of word i says wake word
//	                    64i+j may have bits set
//	cqTableOff        maxQPs completion-queue words, one cache line each:
//	                  the CQ's sleeping flag (written by the owner)
//	wakeOffset        the wake bitmap: bit k says the peer published to a
//	                  queue pair of CQ k while that CQ slept (set by the
//	                  peer with an atomic OR, taken by the owner with a swap)
//	slotsOffset       maxQPs queue-pair slots of slotSize bytes
//
// A queue-pair slot is the inbound ring of the slot owner's queue pair:
//
//	0    prod       entries published (written by the peer, the producer)
//	64   cons       entries consumed (written by the owner)
//	72   consData   data-area bytes consumed (written by the owner)
//	128  state      owner's QP state (written by the owner)
//	132  access     owner's QP remote access flags
//	136  txBlocked  1 while the owner has sends waiting for room at its peer
//	256  entries    ringEntries × entrySize
//	2304 data       dataSize bytes, a byte ring for SEND payloads (to 8 KiB)
//
// Each side reads the other's words once, bounds them and keeps its own
// cursors privately; nothing read back from shared memory is trusted. The
// bell, summary and bitmap words only cause wake-ups: garbage in them
// costs spurious ones (a bit for a CQ not in use is ignored).
const (
	pageSize   = 4096
	cqWordSize = 64
	cqTableOff = pageSize

	offBell    = 64
	offWakeSum = 128

	offProd      = 0
	offCons      = 64
	offConsData  = 72
	offState     = 128
	offAccess    = 132
	offTxBlocked = 136
	offEntries   = 256
	entrySize    = 16
	ringEntries  = 128
	offData      = offEntries + ringEntries*entrySize
	slotSize     = 8 << 10
	dataSize     = slotSize - offData

	// inlineMax is the largest SEND carried in the data area; larger
	// ones travel in a memfd of their own (out of line).
	inlineMax = 2048

	// DefaultMaxQPs bounds the queue pairs (and completion queues) one
	// side of a channel may have.
	DefaultMaxQPs = 16384
	maxMaxQPs     = 1 << 16

	// maxWakeSumWords is the summary's size for maxMaxQPs; it must fit in
	// the header page (checked below).
	maxWakeSumWords = (maxMaxQPs/64 + 63) / 64

	arenaMagic   = 0x4d485352 // "RSHM"
	arenaVersion = 2          // 2: one doorbell per side and a wake bitmap, no eventfd per CQ
)

var _ [pageSize - offWakeSum - 8*maxWakeSumWords]struct{} // the summary fits the header page

// arenaSize is the size of an arena for maxQPs queue pairs.
func arenaSize(maxQPs int) int {
	return slotsOffset(maxQPs) + maxQPs*slotSize
}

// wakeWords is the number of 64-bit words of the wake bitmap, and
// wakeSumWords of its summary.
func wakeWords(maxQPs int) int    { return (maxQPs + 63) / 64 }
func wakeSumWords(maxQPs int) int { return (wakeWords(maxQPs) + 63) / 64 }

func wakeOffset(maxQPs int) int {
	return cqTableOff + pageRound(maxQPs*cqWordSize)
}

func slotsOffset(maxQPs int) int {
	return wakeOffset(maxQPs) + pageRound(wakeWords(maxQPs)*8)
}

func pageRound(n int) int { return (n + pageSize - 1) / pageSize * pageSize }

// Entry opcodes in the inbound ring.
const (
	entSend     = 1
	entSendImm  = 2
	entWriteImm = 3

	entFlagOOL = 1 // the payload came as a memfd over the channel
)

// entry is one inbound ring entry, as read once from shared memory.
type entry struct {
	op, flags uint8
	imm, len  uint32
}

// u64 and u32 view shared words; the offsets are aligned by construction.
func u64(b []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b[off]))
}

func u32(b []byte, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&b[off]))
}

// readEntry copies entry i of slot once into private memory.
func readEntry(slot []byte, i uint64) entry {
	off := offEntries + int(i%ringEntries)*entrySize
	w0 := u64(slot, off).Load()
	w1 := u64(slot, off+8).Load()
	return entry{op: uint8(w0), flags: uint8(w0 >> 8), imm: uint32(w0 >> 32), len: uint32(w1)}
}

// writeEntry stores entry i of slot.
func writeEntry(slot []byte, i uint64, e entry) {
	off := offEntries + int(i%ringEntries)*entrySize
	u64(slot, off).Store(uint64(e.op) | uint64(e.flags)<<8 | uint64(e.imm)<<32)
	u64(slot, off+8).Store(uint64(e.len))
}

// ringCopyIn copies src into the data area of slot at cursor c, wrapping.
func ringCopyIn(slot []byte, c uint64, src []byte) {
	data := slot[offData : offData+dataSize]
	off := int(c % dataSize)
	n := copy(data[off:], src)
	copy(data, src[n:])
}

// ringCopyOut copies n bytes from the data area of slot at cursor c into
// the scatter list dst.
func ringCopyOut(slot []byte, c uint64, n int, dst [][]byte) {
	data := slot[offData : offData+dataSize]
	off := int(c % dataSize)
	for _, d := range dst {
		for len(d) > 0 && n > 0 {
			k := copy(d[:min(len(d), n)], data[off:])
			d, n = d[k:], n-k
			off = (off + k) % dataSize
		}
	}
}
