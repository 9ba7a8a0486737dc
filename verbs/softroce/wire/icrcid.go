package wire

import (
	"hash/crc32"
	"math/bits"
)

// ICRCIDSpan is how many IPv4 IDs, 0 to ICRCIDSpan-1, an ICRCIDTable
// lists one by one: those of a GSO run of up to 64 segments.
const ICRCIDSpan = 64

// icrcIDBits are the bits of the IPv4 header that the ICRC covers and a
// UDP socket does not show: the ID's 16, and don't-fragment.
const icrcIDBits = 17

// ICRCIDTable holds, for IPv4 RoCEv2 packets of one length, how the ICRC
// changes with the IPv4 ID: delta[id] = ICRC(ID id) XOR ICRC(ID 0) for
// the IDs below ICRCIDSpan, and, for the 16 bits of the ID and the DF
// flag, a basis in echelon form (vec[i] with leading bit pivot[i]) of the
// differences they can make. The CRC is affine, so the differences depend
// on nothing but the ID and the packet's length: one ICRC computation and
// a table per length find a packet's ID. It is pure state and does not
// allocate.
type ICRCIDTable struct {
	n     int // packet length; 0: unused
	delta [ICRCIDSpan]uint32
	vec   [icrcIDBits]uint32
	pivot [icrcIDBits]uint32
}

// Len returns the packet length (BTH through pad) t was filled for, or 0.
func (t *ICRCIDTable) Len() int { return t.n }

// Fill computes t for packets of n bytes (BTH through pad).
func (t *ICRCIDTable) Fill(n int) {
	var basis [icrcIDBits]uint32
	icrcIDBasis(&basis, n)
	t.n = n
	t.delta[0] = 0
	for id := 1; id < ICRCIDSpan; id++ {
		t.delta[id] = t.delta[id&(id-1)] ^ basis[bits.TrailingZeros(uint(id))]
	}
	// Gaussian elimination over GF(2): each vector is reduced by the
	// ones before it, so reducing by them in order clears every pivot.
	for i, v := range basis {
		for j := range i {
			if v&t.pivot[j] != 0 {
				v ^= t.vec[j]
			}
		}
		// The 17 differences are independent, so v != 0: CRC-32 detects
		// every burst of up to 32 bits, and the ID and flags are 24 bits
		// in a row.
		t.vec[i], t.pivot[i] = v, 1<<(31-bits.LeadingZeros32(v))
	}
}

// Delta returns ICRC(ID id) XOR ICRC(ID 0), for id below ICRCIDSpan.
func (t *ICRCIDTable) Delta(id int) uint32 { return t.delta[id] }

// ID returns the smallest IPv4 ID below ICRCIDSpan whose difference from
// ID 0 is diff (the ICRC computed for ID 0 XOR the one received), and
// whether there is one.
func (t *ICRCIDTable) ID(diff uint32) (uint16, bool) {
	for id, d := range t.delta {
		if d == diff {
			return uint16(id), true
		}
	}
	return 0, false
}

// AnyID reports whether diff is the difference some IPv4 ID makes, with
// don't-fragment as sent or flipped.
func (t *ICRCIDTable) AnyID(diff uint32) bool {
	for i, v := range t.vec {
		if diff&t.pivot[i] != 0 {
			diff ^= v
		}
	}
	return diff == 0
}

// icrcZeros feeds runs of zero bytes to the CRC in icrcIDBasis.
var icrcZeros [4096]byte

// icrcIDBasis sets b[i] to ICRC(ID 1<<i) XOR ICRC(ID 0), for i < 16, and
// b[16] to the difference don't-fragment makes, for an IPv4 RoCEv2 packet
// of n bytes; the differences depend on nothing but the bits and n.
//
// The CRC is affine in its input, so for two inputs of the same length the
// XOR of their CRCs is the CRC register, started at zero and without the
// final inversion, of the XOR of the inputs: here the ID field alone (the
// two bytes at offset 12, after 8 bytes of 0xFF and 4 of the IPv4 header)
// followed by zeros to the end of the ICRC's input (14 more bytes of the
// IPv4 header, 8 of the UDP header, and the packet). That is linear in the
// ID, so the difference of any ID is the XOR of those of its bits. DF is
// bit 0x40 of the byte after the ID.
func icrcIDBasis(b *[icrcIDBits]uint32, n int) {
	for i := range b {
		id := uint16(1) << i
		field := [3]byte{byte(id >> 8), byte(id), 0} // the ID, then the flags
		if i == 16 {
			field = [3]byte{0, 0, 0x40}
		}
		var r uint32 // the register after those three bytes, from zero
		for _, c := range field {
			r = crc32.IEEETable[byte(r)^c] ^ r>>8
		}
		// Then the zero bytes after them; crc32.Update takes and
		// returns the register inverted.
		r = ^r
		for z := 13 + 8 + n; z > 0; z -= len(icrcZeros) {
			r = crc32.Update(r, crc32.IEEETable, icrcZeros[:min(z, len(icrcZeros))])
		}
		b[i] = ^r
	}
}
