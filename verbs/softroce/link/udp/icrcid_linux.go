//go:build linux

// The ICRC check on receive, with the search over the IPv4 IDs a GSO
// sender's segments carry.

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
// to maxSegs-1 (a GSO sender's segments received one by one).
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
	if diff == 0 || l.is4 && s.idMatch(len(pkt), diff) {
		return link.ICRCGood
	}
	if l.strict {
		return link.ICRCBad
	}
	return link.ICRCUnverified
}

// idMatch reports whether diff, the ICRC received for an IPv4 packet of n
// bytes XOR the ICRC computed for IPv4 ID 0, is the difference that some ID
// in 1 to maxSegs-1 makes.
func (s *rxScratch) idMatch(n int, diff uint32) bool {
	if s.idLen != n {
		idDeltas(&s.idDelta, n)
		s.idLen = n
	}
	for _, d := range s.idDelta[1:] {
		if d == diff {
			return true
		}
	}
	return false
}

// zeros feeds runs of zero bytes to the CRC in idDeltas.
var zeros [4096]byte

// idDeltas sets d[id] to ICRC(ID id) XOR ICRC(ID 0) for an IPv4 RoCEv2
// packet of n bytes; the difference depends on nothing but id and n.
//
// The CRC is affine in its input, so for two inputs of the same length the
// XOR of their CRCs is the CRC register, started at zero and without the
// final inversion, of the XOR of the inputs: here the ID field alone (the
// two bytes at offset 12, after 8 bytes of 0xFF and 4 of the IPv4 header)
// followed by zeros to the end of the ICRC's input (14 more bytes of the
// IPv4 header, 8 of the UDP header, and the packet). That is linear in the
// ID, so d is built from the deltas of the low ID bits.
func idDeltas(d *[maxSegs]uint32, n int) {
	var basis [idBits]uint32
	for b := range basis {
		// The register after the ID bytes {0, 1<<b} from zero.
		r := crc32.IEEETable[1<<b]
		// Then the zero bytes after them; crc32.Update takes and
		// returns the register inverted.
		r = ^r
		for z := 14 + 8 + n; z > 0; z -= len(zeros) {
			r = crc32.Update(r, crc32.IEEETable, zeros[:min(z, len(zeros))])
		}
		basis[b] = ^r
	}
	d[0] = 0
	for id := 1; id < maxSegs; id++ {
		d[id] = d[id&(id-1)] ^ basis[bits.TrailingZeros(uint(id))]
	}
}
