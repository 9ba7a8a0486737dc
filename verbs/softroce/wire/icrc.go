package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// The ICRC (IBA Annex A17, as implemented by Linux rdma_rxe) is CRC-32
// with the IEEE polynomial (the zlib/Ethernet CRC) over:
//
//  1. 8 bytes of 0xFF standing in for the LRH that RoCEv2 does not carry;
//  2. the IP header with its variant fields set to all ones: for IPv4 the
//     TOS, TTL and header checksum; for IPv6 the traffic class, flow label
//     and hop limit (the version nibble is kept);
//  3. the UDP header with the checksum set to 0xFFFF;
//  4. the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF;
//  5. the rest of the packet: extension headers, payload and pad.
//
// The result goes on the wire least significant byte first.

const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	udpProto      = 17
	ipv4DF        = 0x4000
)

// PseudoHeader supplies the IP and UDP header values that the ICRC covers
// and that a UDP socket does not expose as bytes.
type PseudoHeader struct {
	// Src and Dst are the IP source and destination addresses and UDP ports.
	// The packet is IPv4 if Src.Addr().Unmap() is an IPv4 address, else IPv6.
	Src, Dst netip.AddrPort
	// IPID is the IPv4 identification field (unused for IPv6).
	IPID uint16
}

// crcTables are slicing-by-8 tables for the reflected IEEE polynomial;
// crcTables[0] is crc32.IEEETable. They serve the short masked header,
// which lives on the stack and so must not be handed to crc32.Update (its
// argument escapes through an internal function variable).
var crcTables [8][256]uint32

// crcAfterFF is the CRC state after the 8 leading 0xFF bytes.
var crcAfterFF uint32

func init() {
	crcTables[0] = *crc32.IEEETable
	for i := range 256 {
		c := crcTables[0][i]
		for t := 1; t < 8; t++ {
			c = crcTables[0][c&0xff] ^ c>>8
			crcTables[t][i] = c
		}
	}
	ff := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	crcAfterFF = crcUpdate(0, ff[:])
}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p) without letting p
// escape.
func crcUpdate(crc uint32, p []byte) uint32 {
	t := &crcTables
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// finishICRC appends the masked BTH and the rest of pkt to the CRC of the
// masked IP and UDP headers held in hdr[:n] (hdr has room for 12 more bytes).
func finishICRC(hdr *[ipv6HeaderLen + udpHeaderLen + BTHLen]byte, n int, pkt []byte) uint32 {
	m := copy(hdr[n:], pkt[:min(len(pkt), BTHLen)])
	if m > bthECN {
		hdr[n+bthECN] = 0xff
	}
	crc := crcUpdate(crcAfterFF, hdr[:n+m])
	if len(pkt) > BTHLen {
		crc = crc32.Update(crc, crc32.IEEETable, pkt[BTHLen:])
	}
	return crc
}

// ComputeICRC returns the ICRC of a RoCEv2 packet sent or received with the
// addresses, ports and IPv4 ID in ph. pkt runs from the BTH through the pad
// bytes and excludes the ICRC itself. The IP and UDP length fields are
// derived from len(pkt). It does not allocate (pkt is passed on to
// hash/crc32, so the compiler treats it as escaping: a buffer that would
// otherwise live on the caller's stack is moved to the heap).
func ComputeICRC(ph *PseudoHeader, pkt []byte) uint32 {
	var hdr [ipv6HeaderLen + udpHeaderLen + BTHLen]byte
	src, dst := ph.Src.Addr().Unmap(), ph.Dst.Addr().Unmap()
	udpLen := udpHeaderLen + len(pkt) + ICRCLen
	var n int
	if src.Is4() {
		h := hdr[:ipv4HeaderLen]
		h[0] = 0x45
		h[1] = 0xff // TOS
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], ph.IPID)
		binary.BigEndian.PutUint16(h[6:], ipv4DF)
		h[8] = 0xff // TTL
		h[9] = udpProto
		h[10], h[11] = 0xff, 0xff // header checksum
		s := src.As4()
		copy(h[12:16], s[:])
		if dst.Is4() {
			d := dst.As4()
			copy(h[16:20], d[:])
		}
		n = ipv4HeaderLen
	} else {
		h := hdr[:ipv6HeaderLen]
		h[0] = 0x6f // version 6, traffic class and flow label all ones
		h[1], h[2], h[3] = 0xff, 0xff, 0xff
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = udpProto
		h[7] = 0xff // hop limit
		s, d := src.As16(), ph.Dst.Addr().As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		n = ipv6HeaderLen
	}
	u := hdr[n : n+udpHeaderLen]
	binary.BigEndian.PutUint16(u[0:], ph.Src.Port())
	binary.BigEndian.PutUint16(u[2:], ph.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xff, 0xff // checksum
	n += udpHeaderLen
	return finishICRC(&hdr, n, pkt)
}

// ComputeICRCFromHeaders returns the ICRC of a RoCEv2 packet given the IP
// and UDP headers exactly as on the wire: ipUDP is an IPv4 header without
// options (20 bytes) or an IPv6 header (40 bytes, chosen by the version
// nibble) followed by the 8-byte UDP header. pkt runs from the BTH through
// the pad bytes. The headers are masked in a stack copy; ipUDP is not
// modified. It panics if ipUDP is shorter than those headers, and does not
// allocate.
func ComputeICRCFromHeaders(ipUDP []byte, pkt []byte) uint32 {
	var hdr [ipv6HeaderLen + udpHeaderLen + BTHLen]byte
	var n int
	if ipUDP[0]>>4 == 6 {
		n = copy(hdr[:], ipUDP[:ipv6HeaderLen+udpHeaderLen])
		hdr[0] |= 0x0f
		hdr[1], hdr[2], hdr[3] = 0xff, 0xff, 0xff
		hdr[7] = 0xff
	} else {
		n = copy(hdr[:], ipUDP[:ipv4HeaderLen+udpHeaderLen])
		hdr[1] = 0xff
		hdr[8] = 0xff
		hdr[10], hdr[11] = 0xff, 0xff
	}
	hdr[n-2], hdr[n-1] = 0xff, 0xff // UDP checksum
	return finishICRC(&hdr, n, pkt)
}

// PutICRC writes v into dst[0:4] least significant byte first, as on the wire.
func PutICRC(dst []byte, v uint32) { binary.LittleEndian.PutUint32(dst, v) }

// ICRCOf reads a wire-order (little-endian) ICRC from b[0:4].
func ICRCOf(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// ComputeICRCFromParts is ComputeICRCFromHeaders for a packet held in two
// pieces, head (at least the BTH) followed by tail.
func ComputeICRCFromParts(ipUDP, head, tail []byte) uint32 {
	return crc32.Update(ComputeICRCFromHeaders(ipUDP, head), crc32.IEEETable, tail)
}
