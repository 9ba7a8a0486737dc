package wire

import "math/bits"

// Selective acknowledgement, for QPs that negotiated selective repeat (an
// rsock extension in the spirit of IRN, SIGCOMM'18; never sent to a peer
// that did not ask for it). A selective NAK is an RC_SELECTIVE_NAK packet:
// BTH, AETH and a payload that is a SACK bitmap. The BTH PSN is the PSN
// the responder expects next (the first one missing), and the AETH carries
// a PSN sequence error NAK syndrome and the MSN, as a go-back-N NAK does.
// Bit i of the bitmap (bit i%8 of byte i/8, least significant first) says
// that PSN+1+i arrived and was placed. The bitmap is a multiple of 4
// bytes, at most MaxSACKBytes; between peers that negotiated wide SACK
// (rsock's CapWideSACK), at most MaxWideSACKBytes and no more than a
// payload of the path MTU holds.

// RCSelectiveNAK is the opcode of a selective NAK. It lies in the range
// the IBA leaves to manufacturers (0xC0–0xFF).
const RCSelectiveNAK Opcode = 0xe0

// MaxSACKBytes bounds a SACK bitmap: 1024 PSNs past the first missing one.
// A reader that did not negotiate wide SACK reads no more of a bitmap.
const MaxSACKBytes = 128

// MaxWideSACKBytes bounds the SACK bitmap of a QP that negotiated wide
// SACK: 4096 PSNs past the first missing one. With the header it fits
// the payload of a 1024-byte path MTU.
const MaxWideSACKBytes = 512

// SACKHeaderLen is the length of the header before the bitmap.
const SACKHeaderLen = 4

// SACKInfo is a view of a selective NAK's payload: the header and the
// bitmap. A payload shorter than the header reads as no arrivals.
type SACKInfo []byte

// Newest returns the newest PSN that arrived, and false if the payload
// has no header.
func (s SACKInfo) Newest() (uint32, bool) {
	if len(s) < SACKHeaderLen {
		return 0, false
	}
	return uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3]), true
}

// SetNewest writes the header. It requires len(s) >= SACKHeaderLen.
func (s SACKInfo) SetNewest(psn uint32) {
	s[0], s[1], s[2], s[3] = 0, byte(psn>>16), byte(psn>>8), byte(psn)
}

// Bitmap returns the bitmap after the header.
func (s SACKInfo) Bitmap() SACK {
	if len(s) < SACKHeaderLen {
		return nil
	}
	return SACK(s[SACKHeaderLen:])
}

// SACK is a view of a SACK bitmap.
type SACK []byte

// Bits returns how many PSNs the bitmap describes to a reader that reads
// at most MaxSACKBytes of it.
func (s SACK) Bits() int { return s.BitsWithin(MaxSACKBytes) }

// BitsWithin returns how many PSNs the bitmap describes to a reader that
// reads at most maxBytes of it.
func (s SACK) BitsWithin(maxBytes int) int { return 8 * max(min(len(s), maxBytes), 0) }

// NextSet returns the first set bit i with from <= i < n, or -1 if there
// is none; n must be at most s.BitsWithin of the reader's limit. It skips
// clear bytes whole.
func (s SACK) NextSet(from, n int) int {
	n = min(n, 8*len(s))
	for i := max(from, 0); i < n; {
		b := s[i>>3] >> (i & 7)
		if b == 0 {
			i = (i | 7) + 1
			continue
		}
		if i += bits.TrailingZeros8(b); i < n {
			return i
		}
		break
	}
	return -1
}

// Has reports whether bit i is set: PSN+1+i arrived.
func (s SACK) Has(i int) bool {
	return i >= 0 && i < s.Bits() && s[i>>3]&(1<<(i&7)) != 0
}

// Set sets bit i. It requires i < s.Bits().
func (s SACK) Set(i int) { s[i>>3] |= 1 << (i & 7) }

// SACKLen returns the bitmap length that holds bits [0, n): n rounded up
// to a multiple of 32 bits, in bytes, at most MaxSACKBytes.
func SACKLen(n int) int { return SACKLenWithin(n, MaxSACKBytes) }

// SACKLenWithin returns the bitmap length that holds bits [0, n): n
// rounded up to a multiple of 32 bits, in bytes, at most maxBytes (a
// multiple of 4).
func SACKLenWithin(n, maxBytes int) int { return min((max(n, 0)+31)/32*4, maxBytes) }
