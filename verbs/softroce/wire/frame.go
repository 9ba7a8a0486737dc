package wire

import "net/netip"

// MaxFrameHeaderLen is the longest header of a RoCEv2 frame on Ethernet:
// Ethernet, IPv6 and UDP.
const MaxFrameHeaderLen = EthernetLen + IPv6Len + UDPLen

// FrameFields are the fields of the Ethernet, IP and UDP headers of a
// frame carrying a RoCEv2 packet.
type FrameFields struct {
	// SrcMAC and DstMAC are the Ethernet addresses.
	SrcMAC, DstMAC MAC
	// Src and Dst are the IP addresses and UDP ports, of one IP version.
	Src, Dst netip.AddrPort
	// IPID is the IPv4 identification (unused for IPv6).
	IPID uint16
	// PayloadLen is the UDP payload's length: BTH through ICRC.
	PayloadLen int
}

// FrameHeaderLen returns the length of the headers EncodeFrameHeaders
// writes for a frame from src: Ethernet, IPv4 or IPv6, and UDP.
func FrameHeaderLen(src netip.Addr) int {
	if src.Unmap().Is4() {
		return EthernetLen + IPv4MinLen + UDPLen
	}
	return MaxFrameHeaderLen
}

// EncodeFrameHeaders writes into h (at least FrameHeaderLen bytes) the
// Ethernet, IP and UDP headers of a frame carrying a RoCEv2 packet, and
// returns their length. It is IPv4 if f.Src is an IPv4 address (f.Dst
// must be one too), with don't-fragment set and TTL 64, else IPv6 with
// hop limit 64; the UDP checksum is left 0.
func EncodeFrameHeaders(h []byte, f *FrameFields) int {
	src, dst := f.Src.Addr().Unmap(), f.Dst.Addr().Unmap()
	udpLen := UDPLen + f.PayloadLen
	ipLen := IPv6Len
	if src.Is4() {
		ipLen = IPv4MinLen
		Ethernet(h).Encode(f.DstMAC, f.SrcMAC, EtherTypeIPv4)
		IPv4(h[EthernetLen:]).Encode(&IPv4Fields{TotalLen: uint16(IPv4MinLen + udpLen), ID: f.IPID,
			Flags: IPv4DontFragment, TTL: 64, Protocol: IPProtoUDP, Src: src, Dst: dst})
	} else {
		Ethernet(h).Encode(f.DstMAC, f.SrcMAC, EtherTypeIPv6)
		IPv6(h[EthernetLen:]).Encode(&IPv6Fields{PayloadLen: uint16(udpLen), NextHeader: IPProtoUDP,
			HopLimit: 64, Src: src, Dst: dst})
	}
	UDP(h[EthernetLen+ipLen:]).Encode(f.Src.Port(), f.Dst.Port(), uint16(udpLen), 0)
	return EthernetLen + ipLen + UDPLen
}
