package memif

import (
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// maxHeaderLen is the longest frame header this link writes: Ethernet,
// IPv6, UDP.
const maxHeaderLen = wire.EthernetLen + wire.IPv6Len + wire.UDPLen

// encodeHeaders writes the Ethernet, IP and UDP headers of a frame from
// cfg.Local to dst carrying a RoCEv2 packet of pktLen bytes (BTH through
// ICRC) into h, and returns the header length. The IPv4 ID is 0 with DF
// set, as rxe and the udp link send; for IPv6 the UDP checksum is filled
// in afterwards by the caller (it covers the payload).
func encodeHeaders(h []byte, cfg *Config, dst netip.AddrPort, pktLen int) (int, error) {
	src := cfg.Local.Addr().Unmap()
	d := dst.Addr().Unmap()
	if src.Is4() != d.Is4() {
		return 0, fmt.Errorf("memif: destination %v and local address %v differ in IP version", dst, cfg.Local)
	}
	udpLen := wire.UDPLen + pktLen
	if src.Is4() {
		wire.Ethernet(h).Encode(cfg.PeerMAC, cfg.LocalMAC, wire.EtherTypeIPv4)
		ip := wire.IPv4(h[wire.EthernetLen:])
		ip.Encode(&wire.IPv4Fields{TotalLen: uint16(wire.IPv4MinLen + udpLen), Flags: wire.IPv4DontFragment,
			TTL: 64, Protocol: wire.IPProtoUDP, Src: src, Dst: d})
		wire.UDP(h[wire.EthernetLen+wire.IPv4MinLen:]).Encode(cfg.Local.Port(), dst.Port(), uint16(udpLen), 0)
		return wire.EthernetLen + wire.IPv4MinLen + wire.UDPLen, nil
	}
	wire.Ethernet(h).Encode(cfg.PeerMAC, cfg.LocalMAC, wire.EtherTypeIPv6)
	wire.IPv6(h[wire.EthernetLen:]).Encode(&wire.IPv6Fields{PayloadLen: uint16(udpLen), NextHeader: wire.IPProtoUDP,
		HopLimit: 64, Src: src, Dst: d})
	wire.UDP(h[wire.EthernetLen+wire.IPv6Len:]).Encode(cfg.Local.Port(), dst.Port(), uint16(udpLen), 0)
	return maxHeaderLen, nil
}

// udp6Checksum returns the UDP checksum of an IPv6 frame whose headers
// are in h and whose UDP payload is pkt followed by icrc.
func udp6Checksum(h []byte, pkt, icrc []byte) uint16 {
	ip := wire.IPv6(h[wire.EthernetLen:])
	u := wire.UDP(h[wire.EthernetLen+wire.IPv6Len:])
	s := wire.ChecksumUpdate(0, ip[8:40]) // source and destination
	s += wire.IPProtoUDP + uint32(u.Length())
	s = wire.ChecksumUpdate(s, u[:6])
	// pkt may have an odd length: sum pkt|icrc as one even-aligned stream.
	if len(pkt)%2 == 0 {
		s = wire.ChecksumUpdate(s, pkt)
		s = wire.ChecksumUpdate(s, icrc)
	} else {
		s = wire.ChecksumUpdate(s, pkt[:len(pkt)-1])
		var mid [6]byte
		mid[0] = pkt[len(pkt)-1]
		copy(mid[1:], icrc)
		s = wire.ChecksumUpdate(s, mid[:5])
	}
	c := wire.ChecksumFold(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// decodeFrame checks a received frame and locates its RoCEv2 packet: it
// returns the IP and UDP headers (for the ICRC), the packet from BTH
// through ICRC, and the source. ok is false for anything but a whole,
// unfragmented Ethernet/IPv4-without-options or IPv6/UDP frame to port
// 4791 carrying at least a BTH and an ICRC.
func decodeFrame(f []byte) (ipUDP, pkt []byte, src netip.AddrPort, ok bool) {
	if len(f) < wire.EthernetLen {
		return nil, nil, src, false
	}
	var u wire.UDP
	var srcIP netip.Addr
	rest := f[wire.EthernetLen:]
	switch wire.Ethernet(f).EtherType() {
	case wire.EtherTypeIPv4:
		ip := wire.IPv4(rest)
		if !ip.IsValid(len(rest)) || ip.HeaderLen() != wire.IPv4MinLen || ip.Protocol() != wire.IPProtoUDP ||
			ip.Flags()&wire.IPv4MoreFragments != 0 || ip.FragOffset() != 0 {
			return nil, nil, src, false
		}
		u = wire.UDP(ip.Payload())
		srcIP = ip.Src()
		ipUDP = rest[: wire.IPv4MinLen+wire.UDPLen : wire.IPv4MinLen+wire.UDPLen]
	case wire.EtherTypeIPv6:
		ip := wire.IPv6(rest)
		if !ip.IsValid(len(rest)) || ip.NextHeader() != wire.IPProtoUDP {
			return nil, nil, src, false
		}
		u = wire.UDP(ip.Payload())
		srcIP = ip.Src()
		ipUDP = rest[: wire.IPv6Len+wire.UDPLen : wire.IPv6Len+wire.UDPLen]
	default:
		return nil, nil, src, false
	}
	if !u.IsValid(len(u)) || int(u.Length()) != len(u) || u.DstPort() != link.RoCEv2Port ||
		len(u)-wire.UDPLen < wire.BTHLen+wire.ICRCLen {
		return nil, nil, src, false
	}
	return ipUDP, u.Payload(), netip.AddrPortFrom(srcIP, u.SrcPort()), true
}
