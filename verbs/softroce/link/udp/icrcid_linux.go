//go:build linux

// The ICRC check on receive, with the search over the IPv4 IDs a GSO
// sender's segments carry, and over all IPv4 IDs.

package udp

import (
	"hash/crc32"
	"math/bits"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// checkICRC checks the ICRC got of packet pkt from src. It tries IPv4 ID
// hint (the packet's index in a coalesced message), then ID 0, then IDs 1
// to maxSegs-1 (a GSO sender's segments received one by one): a match is
// link.ICRCGood. Over IPv6 every covered field is known, so anything else
// is link.ICRCBad. Over IPv4 it then asks whether any of the 65,536 IDs,
// with don't-fragment set or not, makes the ICRC match (peers such as rxe
// number their datagrams): if one does, the packet is
// link.ICRCUnverified (link.ICRCBad with StrictICRC), its ICRC checked in
// all but the 17 bits the unknown ID and DF take; if none does, the
// packet was damaged or forged carelessly, and is link.ICRCBad.
func (l *Link) checkICRC(s *rxScratch, src netip.AddrPort, pkt []byte, got uint32, hint int) link.ICRCStatus {
	ph := wire.PseudoHeader{Src: src, Dst: l.local}
	if l.is4 && hint != 0 {
		ph.IPID = uint16(hint)
		if wire.ComputeICRC(&ph, pkt) == got {
			return link.ICRCGood
		}
		ph.IPID = 0
	}
	diff := wire.ComputeICRC(&ph, pkt) ^ got
	if diff == 0 {
		return link.ICRCGood
	}
	if !l.is4 {
		return link.ICRCBad
	}
	t := s.ids.table(len(pkt))
	switch {
	case t.gsoID(diff):
		return link.ICRCGood
	case !t.anyID(diff):
		return link.ICRCBad
	case l.strict:
		return link.ICRCBad
	}
	return link.ICRCUnverified
}

// idTable holds, for IPv4 RoCEv2 packets of one length, how the ICRC
// changes with the IPv4 ID: delta[id] = ICRC(ID id) XOR ICRC(ID 0) for
// the IDs of a GSO run, and, for the 16 bits of the ID and the DF flag, a
// basis in echelon form (vec[i] with leading bit pivot[i]) of the
// differences they can make.
type idTable struct {
	n     int // packet length; 0: unused
	delta [maxSegs]uint32
	vec   [unknownBits]uint32
	pivot [unknownBits]uint32
}

// unknownBits are the bits of the IPv4 header that the ICRC covers and a
// UDP socket does not show: the ID's 16, and don't-fragment.
const unknownBits = 17

// idCacheSize is how many packet lengths an idCache holds: a stream's
// full-sized packets, its ACKs and a few short tails.
const idCacheSize = 4

// idCache holds the idTables of the packet lengths seen last.
type idCache struct {
	t    [idCacheSize]idTable
	next int // the entry replaced next
}

// table returns the idTable for packets of n bytes, computing it if
// needed in place of the oldest one. It does not allocate.
func (c *idCache) table(n int) *idTable {
	for i := range c.t {
		if c.t[i].n == n {
			return &c.t[i]
		}
	}
	t := &c.t[c.next]
	c.next = (c.next + 1) % len(c.t)
	t.fill(n)
	return t
}

// fill computes t for packets of n bytes.
func (t *idTable) fill(n int) {
	var basis [unknownBits]uint32
	idBasis(&basis, n)
	t.n = n
	t.delta[0] = 0
	for id := 1; id < maxSegs; id++ {
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

// gsoID reports whether diff is the difference an ID in 1 to maxSegs-1
// makes.
func (t *idTable) gsoID(diff uint32) bool {
	for _, d := range t.delta[1:] {
		if d == diff {
			return true
		}
	}
	return false
}

// anyID reports whether diff is the difference some IPv4 ID makes, with
// don't-fragment as sent or flipped.
func (t *idTable) anyID(diff uint32) bool {
	for i, v := range t.vec {
		if diff&t.pivot[i] != 0 {
			diff ^= v
		}
	}
	return diff == 0
}

// zeros feeds runs of zero bytes to the CRC in idBasis.
var zeros [4096]byte

// idDeltas sets d[id] to ICRC(ID id) XOR ICRC(ID 0) for an IPv4 RoCEv2
// packet of n bytes.
func idDeltas(d *[maxSegs]uint32, n int) {
	var t idTable
	t.fill(n)
	*d = t.delta
}

// idBasis sets b[i] to ICRC(ID 1<<i) XOR ICRC(ID 0), for i < 16, and b[16]
// to the difference don't-fragment makes, for an IPv4 RoCEv2 packet of n
// bytes; the differences depend on nothing but the bits and n.
//
// The CRC is affine in its input, so for two inputs of the same length the
// XOR of their CRCs is the CRC register, started at zero and without the
// final inversion, of the XOR of the inputs: here the ID field alone (the
// two bytes at offset 12, after 8 bytes of 0xFF and 4 of the IPv4 header)
// followed by zeros to the end of the ICRC's input (14 more bytes of the
// IPv4 header, 8 of the UDP header, and the packet). That is linear in the
// ID, so the difference of any ID is the XOR of those of its bits. DF is
// bit 0x40 of the byte after the ID.
func idBasis(b *[unknownBits]uint32, n int) {
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
		for z := 13 + 8 + n; z > 0; z -= len(zeros) {
			r = crc32.Update(r, crc32.IEEETable, zeros[:min(z, len(zeros))])
		}
		b[i] = ^r
	}
}
