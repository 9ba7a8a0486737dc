// Package ethframe builds and parses whole Ethernet/IP/UDP frames carrying
// RoCEv2 packets, for the links that see the wire as Ethernet (memif and
// dpdk): they write the headers themselves and, seeing every byte, check
// the full ICRC.
package ethframe

import (
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// MaxHeaderLen is the longest frame header written: Ethernet, IPv6, UDP.
const MaxHeaderLen = wire.MaxFrameHeaderLen

// Ends names the two ends of a frame: MAC addresses, IP addresses and
// UDP ports.
type Ends struct {
	SrcMAC, DstMAC wire.MAC
	Src, Dst       netip.AddrPort
}

// EncodeHeaders writes into h the Ethernet, IP and UDP headers of a frame
// carrying a RoCEv2 packet of pktLen bytes (BTH through ICRC), and
// returns the header length. The IPv4 ID is 0 with DF set, as rxe and the
// udp link send; for IPv6 the UDP checksum is left 0 (Headers fills it in,
// as it covers the payload).
func EncodeHeaders(h []byte, e *Ends, pktLen int) (int, error) {
	src := e.Src.Addr().Unmap()
	d := e.Dst.Addr().Unmap()
	if src.Is4() != d.Is4() {
		return 0, fmt.Errorf("destination %v and local address %v differ in IP version", e.Dst, e.Src)
	}
	n := wire.EncodeFrameHeaders(h, &wire.FrameFields{SrcMAC: e.SrcMAC, DstMAC: e.DstMAC, Src: e.Src, Dst: e.Dst,
		PayloadLen: pktLen})
	return n, nil
}

// Headers writes the headers of the frame carrying pkt (BTH up to the
// ICRC) into h (at least MaxHeaderLen bytes) and its ICRC into icrc, and
// returns the header length: the frame is h[:n], pkt, icrc.
func Headers(h []byte, e *Ends, pkt []byte, icrc *[wire.ICRCLen]byte) (int, error) {
	return HeadersTail(h, e, pkt, nil, icrc)
}

// HeadersTail is Headers for a packet in two pieces, pkt followed by tail
// (link.Packet.Tail), both of even length when tail is not empty: the
// frame is h[:n], pkt, tail, icrc.
func HeadersTail(h []byte, e *Ends, pkt, tail []byte, icrc *[wire.ICRCLen]byte) (int, error) {
	if len(tail) > 0 && (len(pkt)%2 != 0 || len(tail)%2 != 0) {
		return 0, fmt.Errorf("a packet in pieces of %d and %d bytes: odd", len(pkt), len(tail))
	}
	hl, err := EncodeHeaders(h, e, len(pkt)+len(tail)+wire.ICRCLen)
	if err != nil {
		return 0, err
	}
	wire.PutICRC(icrc[:], wire.ComputeICRCFromParts(h[wire.EthernetLen:hl], pkt, tail))
	if hl == MaxHeaderLen {
		var c uint16
		if len(tail) == 0 {
			c = UDP6Checksum(h, pkt, icrc[:])
		} else {
			c = udp6ChecksumTail(h, pkt, tail, icrc[:])
		}
		wire.UDP(h[hl-wire.UDPLen:]).SetChecksum(c)
	}
	return hl, nil
}

// udp6ChecksumTail is UDP6Checksum for a payload of pkt, tail and icrc,
// pkt and tail of even length.
func udp6ChecksumTail(h []byte, pkt, tail, icrc []byte) uint16 {
	s := udp6Pseudo(h)
	s = wire.ChecksumUpdate(s, pkt)
	s = wire.ChecksumUpdate(s, tail)
	s = wire.ChecksumUpdate(s, icrc)
	return udpChecksumFold(s)
}

// udp6Pseudo sums the IPv6 pseudo-header and the UDP header of the frame
// whose headers are in h.
func udp6Pseudo(h []byte) uint32 {
	ip := wire.IPv6(h[wire.EthernetLen:])
	u := wire.UDP(h[wire.EthernetLen+wire.IPv6Len:])
	s := wire.ChecksumUpdate(0, ip[8:40]) // source and destination
	s += wire.IPProtoUDP + uint32(u.Length())
	return wire.ChecksumUpdate(s, u[:6])
}

// udpChecksumFold folds a sum into a UDP checksum, which is never 0.
func udpChecksumFold(s uint32) uint16 {
	c := wire.ChecksumFold(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// UDP6Checksum returns the UDP checksum of an IPv6 frame whose headers
// are in h and whose UDP payload is pkt followed by icrc.
func UDP6Checksum(h []byte, pkt, icrc []byte) uint16 {
	s := udp6Pseudo(h)
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
	return udpChecksumFold(s)
}

// Frame is what Decode finds in a frame carrying a RoCEv2 packet.
type Frame struct {
	// IPUDP is the IP and UDP headers, which the ICRC covers.
	IPUDP []byte
	// Pkt is the RoCEv2 packet from the BTH through the ICRC.
	Pkt []byte
	// Src is the sender's IP address and UDP port, Dst the destination IP.
	Src netip.AddrPort
	Dst netip.Addr
	// ECN is the codepoint of the IPv4 TOS or IPv6 traffic class.
	ECN link.ECN
}

// Decode checks a received frame and locates its RoCEv2 packet. ok is
// false for anything but a whole, unfragmented Ethernet/IPv4-without-
// options or IPv6/UDP frame to port 4791 carrying at least a BTH and an
// ICRC.
func Decode(f []byte) (fr Frame, ok bool) {
	off, end, ok := decodeHeaders(&fr, f, len(f))
	if !ok {
		return Frame{}, false
	}
	fr.Pkt = f[off:end:end]
	return fr, true
}

// decodeHeaders checks the Ethernet, IP and UDP headers of a total-byte
// frame whose first bytes are h, as Decode does, and fills fr but for
// Pkt, which is frame[off:end].
func decodeHeaders(fr *Frame, h []byte, total int) (off, end int, ok bool) {
	if len(h) < wire.EthernetLen || total < len(h) {
		return 0, 0, false
	}
	rest := h[wire.EthernetLen:]
	switch wire.Ethernet(h).EtherType() {
	case wire.EtherTypeIPv4:
		ip := wire.IPv4(rest)
		if !ip.IsValid(total-wire.EthernetLen) || ip.HeaderLen() != wire.IPv4MinLen || ip.Protocol() != wire.IPProtoUDP ||
			ip.Flags()&wire.IPv4MoreFragments != 0 || ip.FragOffset() != 0 {
			return 0, 0, false
		}
		off, end = wire.EthernetLen+wire.IPv4MinLen, wire.EthernetLen+int(ip.TotalLen())
		fr.Src = netip.AddrPortFrom(ip.Src(), 0)
		fr.Dst = ip.Dst()
		fr.ECN = link.ECN(ip.TOS() & 3)
	case wire.EtherTypeIPv6:
		ip := wire.IPv6(rest)
		if !ip.IsValid(total-wire.EthernetLen) || ip.NextHeader() != wire.IPProtoUDP {
			return 0, 0, false
		}
		off, end = wire.EthernetLen+wire.IPv6Len, wire.EthernetLen+wire.IPv6Len+int(ip.PayloadLen())
		fr.Src = netip.AddrPortFrom(ip.Src(), 0)
		fr.Dst = ip.Dst()
		fr.ECN = link.ECN(ip.TrafficClass() & 3)
	default:
		return 0, 0, false
	}
	if len(h) < off+wire.UDPLen {
		return 0, 0, false
	}
	u := wire.UDP(h[off : off+wire.UDPLen])
	if !u.IsValid(end-off) || int(u.Length()) != end-off || u.DstPort() != link.RoCEv2Port ||
		end-off-wire.UDPLen < wire.BTHLen+wire.ICRCLen {
		return 0, 0, false
	}
	fr.Src = netip.AddrPortFrom(fr.Src.Addr(), u.SrcPort())
	fr.IPUDP = h[wire.EthernetLen : off+wire.UDPLen : off+wire.UDPLen]
	return off + wire.UDPLen, end, true
}

// Deliver fills p from a decoded frame, checking its ICRC: p.Buf becomes
// a view of the frame.
func Deliver(p *link.Packet, fr *Frame) {
	n := len(fr.Pkt) - wire.ICRCLen
	p.Buf = fr.Pkt
	p.N = n
	p.Tail = nil
	p.Addr = fr.Src
	p.ECN = fr.ECN
	if wire.ComputeICRCFromHeaders(fr.IPUDP, fr.Pkt[:n]) == wire.ICRCOf(fr.Pkt[n:]) {
		p.ICRC = link.ICRCGood
	} else {
		p.ICRC = link.ICRCBad
	}
}

// SplitHeadLen is how many bytes of a frame DeliverSplit needs copied:
// the longest Ethernet, IP and UDP headers and the longest RoCEv2
// headers (a BTH and an AtomicETH).
const SplitHeadLen = MaxHeaderLen + wire.BTHLen + wire.AtomicETHLen

// DeliverSplit is Decode and Deliver for a frame whose first bytes were
// copied into head and whose whole is frame, in memory the peer can
// still write (len(head) <= len(frame)). Every header is read from head;
// the payload is left in frame: p.Buf becomes the packet's headers in head and
// p.Tail its payload and pad bytes in frame. The ICRC is computed over
// head's headers and frame's payload as they are now. It returns false
// for what Decode rejects, and for a packet whose headers do not fit in
// head (which the caller then copies whole).
func DeliverSplit(p *link.Packet, head, frame []byte) bool {
	var fr Frame
	off, end, ok := decodeHeaders(&fr, head, len(frame))
	if !ok || off >= len(head) {
		return false
	}
	hl := wire.Opcode(head[off]).HeaderLen()
	pktEnd := end - wire.ICRCLen
	if hl == 0 || off+hl > len(head) || off+hl > pktEnd {
		return false
	}
	p.Buf = head[off : off+hl : off+hl]
	p.N = hl
	p.Tail = frame[off+hl : pktEnd : end]
	p.Addr = fr.Src
	p.ECN = fr.ECN
	// The ICRC is read from shared memory once, like the payload.
	if wire.ComputeICRCFromParts(fr.IPUDP, p.Buf, p.Tail) == wire.ICRCOf(frame[pktEnd:end]) {
		p.ICRC = link.ICRCGood
	} else {
		p.ICRC = link.ICRCBad
	}
	return true
}
