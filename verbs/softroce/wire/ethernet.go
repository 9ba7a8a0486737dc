package wire

import "encoding/binary"

// EthernetLen is the length of an untagged Ethernet II header.
const EthernetLen = 14

// EtherTypes carried by RoCEv2 frames.
const (
	// EtherTypeIPv4 marks an IPv4 payload.
	EtherTypeIPv4 = 0x0800
	// EtherTypeIPv6 marks an IPv6 payload.
	EtherTypeIPv6 = 0x86dd
)

// MAC is a 48-bit Ethernet address.
type MAC [6]byte

// Ethernet is a view of an untagged Ethernet II header:
//
//	bytes 0-5   destination MAC
//	bytes 6-11  source MAC
//	bytes 12-13 EtherType
//
// Methods require len(e) >= EthernetLen.
type Ethernet []byte

// Dst returns the destination address.
func (e Ethernet) Dst() MAC { return MAC(e[0:6]) }

// Src returns the source address.
func (e Ethernet) Src() MAC { return MAC(e[6:12]) }

// EtherType returns the type of the payload.
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[12:]) }

// Encode writes all 14 bytes of the header.
func (e Ethernet) Encode(dst, src MAC, etherType uint16) {
	_ = e[EthernetLen-1]
	copy(e[0:6], dst[:])
	copy(e[6:12], src[:])
	binary.BigEndian.PutUint16(e[12:], etherType)
}
