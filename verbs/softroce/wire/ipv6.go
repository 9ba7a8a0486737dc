package wire

import (
	"encoding/binary"
	"net/netip"
)

// IPv6Len is the length of the fixed IPv6 header.
const IPv6Len = 40

// IPv6 is a view of the fixed IPv6 header (RFC 8200):
//
//	bytes 0-3   version(31:28) traffic class(27:20) flow label(19:0)
//	bytes 4-5   payload length
//	byte 6      next header
//	byte 7      hop limit
//	bytes 8-23  source address
//	bytes 24-39 destination address
//
// Methods require len(b) >= IPv6Len.
type IPv6 []byte

// IPv6Fields holds the fields IPv6.Encode writes.
type IPv6Fields struct {
	// TrafficClass is the traffic class byte (DSCP and ECN).
	TrafficClass uint8
	// FlowLabel is the 20-bit flow label.
	FlowLabel uint32
	// PayloadLen is the length of what follows the fixed header.
	PayloadLen uint16
	// NextHeader is the type of the next header (IPProtoUDP for RoCEv2).
	NextHeader uint8
	// HopLimit is the hop limit.
	HopLimit uint8
	// Src and Dst are the addresses, taken as 16-byte IPv6 addresses.
	Src, Dst netip.Addr
}

// Version returns the version nibble (6 for a valid header).
func (b IPv6) Version() uint8 { return b[0] >> 4 }

// TrafficClass returns the traffic class byte.
func (b IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(b[0:]) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(b[0:]) & 0xfffff }

// PayloadLen returns the payload length field.
func (b IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(b[4:]) }

// NextHeader returns the next header field.
func (b IPv6) NextHeader() uint8 { return b[6] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[7] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(b[8:24])) }

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(b[24:40])) }

// IsValid reports whether b holds an IPv6 header for a datagram of which
// pktLen bytes (fixed header included) are present: version 6 and a
// payload that fits in pktLen.
func (b IPv6) IsValid(pktLen int) bool {
	return len(b) >= IPv6Len && b.Version() == 6 && IPv6Len+int(b.PayloadLen()) <= pktLen
}

// Payload returns the bytes after the fixed header, up to PayloadLen; b
// must be valid and hold the whole datagram.
func (b IPv6) Payload() []byte {
	end := IPv6Len + int(b.PayloadLen())
	return b[IPv6Len:end:end]
}

// Encode writes the 40-byte fixed header from f. FlowLabel is truncated to
// 20 bits.
func (b IPv6) Encode(f *IPv6Fields) {
	_ = b[IPv6Len-1]
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(b[4:], f.PayloadLen)
	b[6] = f.NextHeader
	b[7] = f.HopLimit
	s, d := f.Src.As16(), f.Dst.As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
}
