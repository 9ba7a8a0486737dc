package rsock

import "encoding/binary"

// Immediate data of a data write: 3 bits of type, 29 bits of value.
const (
	immTypeShift = 29
	immValueMask = 1<<immTypeShift - 1
	immData      = 1
	// maxMessage is the largest data message, bounded by the 29-bit length.
	maxMessage = immValueMask
)

func dataImm(n int) uint32 { return immData<<immTypeShift | uint32(n) }

// Control frame: a SEND of controlLen bytes.
//
//	0     type
//	1..7  zero
//	8..15 consumed: bytes the sender's reader consumed (cumulative)
//	16..23 processed: messages the sender processed (cumulative)
const controlLen = 24

// Control message types.
const (
	ctrlCredit    = 1
	ctrlFIN       = 2 // no more data from the sender
	ctrlClose     = 3 // the sender closed the stream
	ctrlKeepAlive = 4
)

func putControl(b []byte, typ byte, consumed, processed uint64) {
	clear(b[:8])
	b[0] = typ
	binary.BigEndian.PutUint64(b[8:], consumed)
	binary.BigEndian.PutUint64(b[16:], processed)
}

// parseControl decodes a control frame; ok is false for a malformed one.
func parseControl(b []byte) (typ byte, consumed, processed uint64, ok bool) {
	if len(b) != controlLen || b[0] < ctrlCredit || b[0] > ctrlKeepAlive {
		return 0, 0, 0, false
	}
	for _, x := range b[1:8] {
		if x != 0 {
			return 0, 0, 0, false
		}
	}
	return b[0], binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:]), true
}
