package wire

import (
	"net/netip"
	"testing"
)

// TestEncodeFrameHeaders reads back the headers EncodeFrameHeaders writes,
// over IPv4 (with a 4-in-6 mapped source) and IPv6.
func TestEncodeFrameHeaders(t *testing.T) {
	srcMAC, dstMAC := MAC{2, 0, 0, 0, 0, 1}, MAC{2, 0, 0, 0, 0, 2}
	for _, c := range []struct {
		src, dst  netip.AddrPort
		etherType uint16
		hdr       int
	}{
		{netip.MustParseAddrPort("[::ffff:192.0.2.1]:49152"), netip.MustParseAddrPort("192.0.2.2:4791"), EtherTypeIPv4, 42},
		{netip.MustParseAddrPort("[fd00::1]:49152"), netip.MustParseAddrPort("[fd00::2]:4791"), EtherTypeIPv6, 62},
	} {
		h := make([]byte, MaxFrameHeaderLen)
		f := FrameFields{SrcMAC: srcMAC, DstMAC: dstMAC, Src: c.src, Dst: c.dst, IPID: 7, PayloadLen: 100}
		n := EncodeFrameHeaders(h, &f)
		if n != c.hdr || FrameHeaderLen(c.src.Addr()) != c.hdr {
			t.Fatalf("%v: header length %d (FrameHeaderLen %d), want %d", c.src, n, FrameHeaderLen(c.src.Addr()), c.hdr)
		}
		e := Ethernet(h)
		if e.Src() != srcMAC || e.Dst() != dstMAC || e.EtherType() != c.etherType {
			t.Fatalf("%v: Ethernet %v %v %#x", c.src, e.Src(), e.Dst(), e.EtherType())
		}
		src, dst := c.src.Addr().Unmap(), c.dst.Addr().Unmap()
		if c.etherType == EtherTypeIPv4 {
			ip := IPv4(h[EthernetLen:])
			if ip.Src() != src || ip.Dst() != dst || ip.ID() != 7 || ip.TotalLen() != IPv4MinLen+UDPLen+100 ||
				ip.Flags() != IPv4DontFragment || ip.TTL() != 64 || ip.Protocol() != IPProtoUDP || !ip.ChecksumValid() {
				t.Fatalf("IPv4 header %x", []byte(ip[:IPv4MinLen]))
			}
		} else {
			ip := IPv6(h[EthernetLen:])
			if ip.Src() != src || ip.Dst() != dst || ip.PayloadLen() != UDPLen+100 || ip.NextHeader() != IPProtoUDP || ip.HopLimit() != 64 {
				t.Fatalf("IPv6 header %x", []byte(ip[:IPv6Len]))
			}
		}
		u := UDP(h[n-UDPLen : n])
		if u.SrcPort() != c.src.Port() || u.DstPort() != c.dst.Port() || u.Length() != UDPLen+100 || u.Checksum() != 0 {
			t.Fatalf("%v: UDP header %x", c.src, []byte(u))
		}
	}
}
