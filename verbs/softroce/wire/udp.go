package wire

import (
	"encoding/binary"
	"net/netip"
)

// UDPLen is the length of the UDP header.
const UDPLen = 8

// UDP is a view of the UDP header (RFC 768):
//
//	bytes 0-1 source port
//	bytes 2-3 destination port
//	bytes 4-5 length (header and payload)
//	bytes 6-7 checksum
//
// Methods require len(u) >= UDPLen.
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[0:]) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the length field.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[4:]) }

// Checksum returns the checksum field.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:]) }

// IsValid reports whether the length field covers at least the header and
// at most the avail bytes present from the start of u.
func (u UDP) IsValid(avail int) bool {
	if len(u) < UDPLen {
		return false
	}
	l := int(u.Length())
	return l >= UDPLen && l <= avail
}

// Payload returns u[UDPLen:Length()]; u must be valid and hold the whole
// datagram.
func (u UDP) Payload() []byte {
	n := u.Length()
	return u[UDPLen:n:n]
}

// Encode writes all four fields.
func (u UDP) Encode(src, dst, length, checksum uint16) {
	_ = u[UDPLen-1]
	binary.BigEndian.PutUint16(u[0:], src)
	binary.BigEndian.PutUint16(u[2:], dst)
	binary.BigEndian.PutUint16(u[4:], length)
	binary.BigEndian.PutUint16(u[6:], checksum)
}

// SetChecksum overwrites the checksum field.
func (u UDP) SetChecksum(v uint16) { binary.BigEndian.PutUint16(u[6:], v) }

// CalculateChecksum returns the UDP checksum of the datagram u[:Length()]
// sent from src to dst (both IPv4 or both IPv6), with the checksum field
// counted as zero. A computed 0 is returned as 0xffff, since 0 on the wire
// means "no checksum" (allowed for IPv4 only). u must be valid.
func (u UDP) CalculateChecksum(src, dst netip.Addr) uint16 {
	n := int(u.Length())
	var s uint32
	if src.Unmap().Is4() {
		a, b := src.Unmap().As4(), dst.Unmap().As4()
		s = ChecksumUpdate(s, a[:])
		s = ChecksumUpdate(s, b[:])
	} else {
		a, b := src.As16(), dst.As16()
		s = ChecksumUpdate(s, a[:])
		s = ChecksumUpdate(s, b[:])
	}
	s += IPProtoUDP + uint32(n)
	s = ChecksumUpdate(s, u[:6])
	s = ChecksumUpdate(s, u[UDPLen:n])
	c := ChecksumFold(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}
