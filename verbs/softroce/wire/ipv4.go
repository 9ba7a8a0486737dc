package wire

import (
	"encoding/binary"
	"net/netip"
)

// IPv4MinLen is the length of an IPv4 header without options.
const IPv4MinLen = 20

// IPProtoUDP is the IP protocol number of UDP.
const IPProtoUDP = 17

// IPv4 is a view of an IPv4 header (RFC 791):
//
//	byte 0      version(7:4) IHL(3:0)
//	byte 1      type of service (DSCP and ECN)
//	bytes 2-3   total length
//	bytes 4-5   identification
//	bytes 6-7   flags(15:13) fragment offset(12:0)
//	byte 8      time to live
//	byte 9      protocol
//	bytes 10-11 header checksum
//	bytes 12-15 source address
//	bytes 16-19 destination address
//	options     (IHL*4 - 20 bytes)
//
// Methods require len(b) >= IPv4MinLen; IsValid checks a received header
// before use, and Options and Payload rely on it having passed.
type IPv4 []byte

// IPv4Fields holds the fields IPv4.Encode writes. Options are not
// supported: Encode writes a 20-byte header.
type IPv4Fields struct {
	// TOS is the type of service byte (DSCP and ECN).
	TOS uint8
	// TotalLen is the length of the datagram, header included.
	TotalLen uint16
	// ID is the identification field.
	ID uint16
	// Flags are the three flag bits (IPv4DontFragment, IPv4MoreFragments).
	Flags uint8
	// FragOffset is the fragment offset in 8-byte units (13 bits).
	FragOffset uint16
	// TTL is the time to live.
	TTL uint8
	// Protocol is the payload's IP protocol number.
	Protocol uint8
	// Src and Dst are the addresses; they must be IPv4 (or 4-in-6 mapped).
	Src, Dst netip.Addr
}

// IPv4 flag bits, as in IPv4Fields.Flags.
const (
	// IPv4DontFragment is the DF bit.
	IPv4DontFragment = 2
	// IPv4MoreFragments is the MF bit.
	IPv4MoreFragments = 1
)

// Version returns the version nibble (4 for a valid header).
func (b IPv4) Version() uint8 { return b[0] >> 4 }

// HeaderLen returns the header length in bytes given by the IHL field.
func (b IPv4) HeaderLen() int { return int(b[0]&0xf) * 4 }

// TOS returns the type of service byte.
func (b IPv4) TOS() uint8 { return b[1] }

// TotalLen returns the total length field.
func (b IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[4:]) }

// Flags returns the three flag bits.
func (b IPv4) Flags() uint8 { return b[6] >> 5 }

// FragOffset returns the fragment offset in 8-byte units.
func (b IPv4) FragOffset() uint16 { return binary.BigEndian.Uint16(b[6:]) & 0x1fff }

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[8] }

// Protocol returns the payload's IP protocol number.
func (b IPv4) Protocol() uint8 { return b[9] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[10:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[12:16])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[16:20])) }

// IsValid reports whether b holds a well-formed IPv4 header for a datagram
// of which pktLen bytes (header included) are present: version 4, an IHL of
// at least 5 that fits in b, and a total length between the header length
// and pktLen. It does not check the checksum.
func (b IPv4) IsValid(pktLen int) bool {
	if len(b) < IPv4MinLen || b.Version() != 4 {
		return false
	}
	hl := b.HeaderLen()
	tl := int(b.TotalLen())
	return hl >= IPv4MinLen && hl <= len(b) && tl >= hl && tl <= pktLen
}

// Options returns the options, b[20:HeaderLen()] (capacity capped); b must
// be valid.
func (b IPv4) Options() []byte {
	hl := b.HeaderLen()
	return b[IPv4MinLen:hl:hl]
}

// Payload returns b[HeaderLen():TotalLen()] (capacity capped); b must be
// valid and hold the whole datagram.
func (b IPv4) Payload() []byte {
	tl := b.TotalLen()
	return b[b.HeaderLen():tl:tl]
}

// CalculateChecksum returns the checksum of the header (options included)
// with the checksum field counted as zero.
func (b IPv4) CalculateChecksum() uint16 {
	hl := min(b.HeaderLen(), len(b))
	s := ChecksumUpdate(0, b[:10])
	return ChecksumFold(ChecksumUpdate(s, b[12:max(hl, 12)]))
}

// ChecksumValid reports whether the header checksum field matches the
// header.
func (b IPv4) ChecksumValid() bool { return b.CalculateChecksum() == b.Checksum() }

// SetChecksum overwrites the header checksum field.
func (b IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[10:], v) }

// Encode writes a 20-byte header (IHL 5, no options) from f, including its
// checksum. Flags and FragOffset are truncated to their field widths.
func (b IPv4) Encode(f *IPv4Fields) {
	_ = b[IPv4MinLen-1]
	b[0] = 0x45
	b[1] = f.TOS
	binary.BigEndian.PutUint16(b[2:], f.TotalLen)
	binary.BigEndian.PutUint16(b[4:], f.ID)
	binary.BigEndian.PutUint16(b[6:], uint16(f.Flags&7)<<13|f.FragOffset&0x1fff)
	b[8] = f.TTL
	b[9] = f.Protocol
	s, d := f.Src.Unmap().As4(), f.Dst.Unmap().As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	b.SetChecksum(0)
	b.SetChecksum(b.CalculateChecksum())
}
