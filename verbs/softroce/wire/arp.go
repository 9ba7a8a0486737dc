package wire

import (
	"encoding/binary"
	"net/netip"
)

// EtherTypeARP marks an ARP payload.
const EtherTypeARP = 0x0806

// ARPLen is the length of an ARP packet for IPv4 over Ethernet.
const ARPLen = 28

// ARP operations.
const (
	ARPRequest = 1
	ARPReply   = 2
)

// BroadcastMAC is the Ethernet broadcast address.
var BroadcastMAC = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ARP is a view of an ARP packet for IPv4 over Ethernet (RFC 826):
//
//	bytes 0-1   hardware type (1, Ethernet)
//	bytes 2-3   protocol type (0x0800, IPv4)
//	byte  4     hardware address length (6)
//	byte  5     protocol address length (4)
//	bytes 6-7   operation
//	bytes 8-13  sender MAC
//	bytes 14-17 sender IPv4 address
//	bytes 18-23 target MAC
//	bytes 24-27 target IPv4 address
//
// Methods require len(a) >= ARPLen.
type ARP []byte

// IsValid reports whether the packet is at least ARPLen bytes and
// describes IPv4 over Ethernet.
func (a ARP) IsValid() bool {
	return len(a) >= ARPLen && binary.BigEndian.Uint16(a[0:]) == 1 &&
		binary.BigEndian.Uint16(a[2:]) == EtherTypeIPv4 && a[4] == 6 && a[5] == 4
}

// Op returns the operation.
func (a ARP) Op() uint16 { return binary.BigEndian.Uint16(a[6:]) }

// SenderMAC returns the sender's hardware address.
func (a ARP) SenderMAC() MAC { return MAC(a[8:14]) }

// SenderIP returns the sender's IPv4 address.
func (a ARP) SenderIP() netip.Addr { return netip.AddrFrom4([4]byte(a[14:18])) }

// TargetMAC returns the target's hardware address.
func (a ARP) TargetMAC() MAC { return MAC(a[18:24]) }

// TargetIP returns the target's IPv4 address.
func (a ARP) TargetIP() netip.Addr { return netip.AddrFrom4([4]byte(a[24:28])) }

// Encode writes all ARPLen bytes of an IPv4-over-Ethernet packet.
func (a ARP) Encode(op uint16, senderMAC MAC, senderIP netip.Addr, targetMAC MAC, targetIP netip.Addr) {
	_ = a[ARPLen-1]
	binary.BigEndian.PutUint16(a[0:], 1)
	binary.BigEndian.PutUint16(a[2:], EtherTypeIPv4)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], op)
	s, t := senderIP.Unmap().As4(), targetIP.Unmap().As4()
	copy(a[8:14], senderMAC[:])
	copy(a[14:18], s[:])
	copy(a[18:24], targetMAC[:])
	copy(a[24:28], t[:])
}
