package wire

import "net/netip"

// NDPNeighborSolicitMinLen is the length of a neighbour solicitation's
// body without options.
const NDPNeighborSolicitMinLen = 20

// NDPNeighborSolicit is a view of the body of an ICMPv6 neighbour
// solicitation (RFC 4861 4.3), after the ICMPv6 header:
//
//	bytes 0-3   reserved
//	bytes 4-19  target address
//	bytes 20-   options
//
// Methods require len(b) >= NDPNeighborSolicitMinLen.
type NDPNeighborSolicit []byte

// TargetAddress returns the address being resolved.
func (b NDPNeighborSolicit) TargetAddress() netip.Addr {
	return netip.AddrFrom16([16]byte(b[4:20]))
}

// Options returns the options.
func (b NDPNeighborSolicit) Options() NDPOptions {
	return NDPOptions(b[NDPNeighborSolicitMinLen:len(b):len(b)])
}

// Encode clears the reserved field and writes the target address.
func (b NDPNeighborSolicit) Encode(target netip.Addr) {
	_ = b[NDPNeighborSolicitMinLen-1]
	clear(b[0:4])
	t := target.As16()
	copy(b[4:20], t[:])
}

// SolicitedNodeAddr returns the solicited-node multicast address of ip
// (RFC 4291 2.7.1), which solicitations for ip are sent to:
// ff02::1:ffXX:XXXX with ip's low 24 bits.
func SolicitedNodeAddr(ip netip.Addr) netip.Addr {
	a := ip.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

// IPv6MulticastMAC returns the Ethernet address that IPv6 multicast
// address ip maps to (RFC 2464 7): 33:33 and ip's low 32 bits.
func IPv6MulticastMAC(ip netip.Addr) MAC {
	a := ip.As16()
	return MAC{0x33, 0x33, a[12], a[13], a[14], a[15]}
}
