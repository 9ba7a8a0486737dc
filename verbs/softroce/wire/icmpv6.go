package wire

import (
	"encoding/binary"
	"net/netip"
)

// IPProtoICMPv6 is the IPv6 next header of ICMPv6.
const IPProtoICMPv6 = 58

// ICMPv6 types of neighbour discovery (RFC 4861).
const (
	ICMPv6NeighborSolicit = 135
	ICMPv6NeighborAdvert  = 136
)

// ICMPv6MinLen is the length of the ICMPv6 header.
const ICMPv6MinLen = 4

// ICMPv6 is a view of an ICMPv6 message (RFC 4443), which runs to the
// end of the slice:
//
//	byte 0     type
//	byte 1     code
//	bytes 2-3  checksum (over an IPv6 pseudo-header and the message)
//	bytes 4-   body
//
// Methods require len(b) >= ICMPv6MinLen.
type ICMPv6 []byte

// Type returns the message type.
func (b ICMPv6) Type() uint8 { return b[0] }

// Code returns the message code.
func (b ICMPv6) Code() uint8 { return b[1] }

// Checksum returns the checksum field.
func (b ICMPv6) Checksum() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// Body returns the bytes after the header.
func (b ICMPv6) Body() []byte { return b[ICMPv6MinLen:len(b):len(b)] }

// Encode writes the type and code and clears the checksum.
func (b ICMPv6) Encode(typ, code uint8) {
	_ = b[ICMPv6MinLen-1]
	b[0], b[1], b[2], b[3] = typ, code, 0, 0
}

// SetChecksum computes the checksum of the message (all of b) sent from
// src to dst, and stores it.
func (b ICMPv6) SetChecksum(src, dst netip.Addr) {
	b[2], b[3] = 0, 0
	binary.BigEndian.PutUint16(b[2:], ChecksumFold(icmpv6Sum(src, dst, b)))
}

// ChecksumValid reports whether the checksum of the message (all of b)
// from src to dst is right.
func (b ICMPv6) ChecksumValid(src, dst netip.Addr) bool {
	return ChecksumFold(icmpv6Sum(src, dst, b)) == 0
}

// icmpv6Sum is the unfolded sum of the IPv6 pseudo-header (RFC 8200
// 8.1) of an ICMPv6 message m from src to dst, and of m.
func icmpv6Sum(src, dst netip.Addr, m []byte) uint32 {
	s, d := src.As16(), dst.As16()
	sum := ChecksumUpdate(0, s[:])
	sum = ChecksumUpdate(sum, d[:])
	n := uint32(len(m))
	sum += n>>16 + n&0xffff + IPProtoICMPv6
	return ChecksumUpdate(sum, m)
}
