package wire

import "net/netip"

// NDPNeighborAdvertMinLen is the length of a neighbour advertisement's
// body without options.
const NDPNeighborAdvertMinLen = 20

// Flags of a neighbour advertisement.
const (
	// NDPAdvertRouter: the sender is a router.
	NDPAdvertRouter = 0x80
	// NDPAdvertSolicited: the advertisement answers a solicitation.
	NDPAdvertSolicited = 0x40
	// NDPAdvertOverride: the advertisement overrides a cached address.
	NDPAdvertOverride = 0x20
)

// NDPNeighborAdvert is a view of the body of an ICMPv6 neighbour
// advertisement (RFC 4861 4.4), after the ICMPv6 header:
//
//	byte 0      flags: router(7) solicited(6) override(5), reserved(4:0)
//	bytes 1-3   reserved
//	bytes 4-19  target address
//	bytes 20-   options
//
// Methods require len(b) >= NDPNeighborAdvertMinLen.
type NDPNeighborAdvert []byte

// Flags returns the flag bits (NDPAdvertRouter, NDPAdvertSolicited,
// NDPAdvertOverride).
func (b NDPNeighborAdvert) Flags() uint8 {
	return b[0] & (NDPAdvertRouter | NDPAdvertSolicited | NDPAdvertOverride)
}

// TargetAddress returns the address advertised.
func (b NDPNeighborAdvert) TargetAddress() netip.Addr {
	return netip.AddrFrom16([16]byte(b[4:20]))
}

// Options returns the options.
func (b NDPNeighborAdvert) Options() NDPOptions {
	return NDPOptions(b[NDPNeighborAdvertMinLen:len(b):len(b)])
}

// Encode writes the flags and the target address and clears the
// reserved bits.
func (b NDPNeighborAdvert) Encode(flags uint8, target netip.Addr) {
	_ = b[NDPNeighborAdvertMinLen-1]
	clear(b[0:4])
	b[0] = flags & (NDPAdvertRouter | NDPAdvertSolicited | NDPAdvertOverride)
	t := target.As16()
	copy(b[4:20], t[:])
}
