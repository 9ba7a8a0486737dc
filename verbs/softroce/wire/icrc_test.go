package wire

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// refICRC is a deliberately naive ICRC for cross-checking: it builds the
// whole covered byte string with the variant fields masked and hashes it
// with crc32.ChecksumIEEE.
func refICRC(ipUDP, pkt []byte) uint32 {
	h := bytes.Clone(ipUDP)
	switch h[0] >> 4 {
	case 4:
		h[1] = 0xff               // TOS
		h[8] = 0xff               // TTL
		h[10], h[11] = 0xff, 0xff // header checksum
		h[26], h[27] = 0xff, 0xff // UDP checksum
	case 6:
		h[0] |= 0x0f                        // traffic class, high nibble
		h[1], h[2], h[3] = 0xff, 0xff, 0xff // traffic class low nibble, flow label
		h[7] = 0xff                         // hop limit
		h[46], h[47] = 0xff, 0xff           // UDP checksum
	default:
		panic("bad IP version")
	}
	bth := bytes.Clone(pkt[:min(len(pkt), BTHLen)])
	if len(bth) > 4 {
		bth[4] = 0xff
	}
	var all []byte
	all = append(all, bytes.Repeat([]byte{0xff}, 8)...)
	all = append(all, h...)
	all = append(all, bth...)
	if len(pkt) > BTHLen {
		all = append(all, pkt[BTHLen:]...)
	}
	return crc32.ChecksumIEEE(all)
}

// buildIPUDP builds real IP and UDP headers as a sender would, with the
// given variant field values, for a RoCEv2 packet of pktLen bytes (BTH
// through pad) plus ICRC.
func buildIPUDP(src, dst netip.AddrPort, id uint16, tos, ttl uint8, flow uint32, udpCsum uint16, pktLen int) []byte {
	udpLen := 8 + pktLen + ICRCLen
	var h []byte
	if src.Addr().Unmap().Is4() {
		h = make([]byte, 28)
		h[0] = 0x45
		h[1] = tos
		binary.BigEndian.PutUint16(h[2:], uint16(20+udpLen))
		binary.BigEndian.PutUint16(h[4:], id)
		binary.BigEndian.PutUint16(h[6:], 0x4000)
		h[8] = ttl
		h[9] = 17
		binary.BigEndian.PutUint16(h[10:], 0xbeef) // not a real checksum: it is masked anyway
		s, d := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
	} else {
		h = make([]byte, 48)
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(tos)<<20|flow&0xfffff)
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = 17
		h[7] = ttl
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(h[8:], s[:])
		copy(h[24:], d[:])
	}
	u := h[len(h)-8:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	binary.BigEndian.PutUint16(u[6:], udpCsum)
	return h
}

func TestICRCPseudoHeaderMatchesHeaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := []struct{ name, src, dst string }{
		{"ipv4", "192.0.2.1", "192.0.2.2"},
		{"ipv4 loopback", "127.0.0.1", "127.0.0.1"},
		{"ipv6", "2001:db8::1", "2001:db8::2"},
		{"ipv6 loopback", "::1", "::1"},
		{"ipv6 link-local", "fe80::1:2:3:4", "fe80::ffff:ffff:ffff:ffff"},
	}
	lengths := []int{0, 3, 4, 5, 12, 16, 28, 40, 13 + 12 + 3, 4096 + 12, 4096 + 32}
	for _, a := range addrs {
		for _, n := range lengths {
			pkt := make([]byte, n)
			for i := range pkt {
				pkt[i] = byte(rng.Uint32())
			}
			ph := &PseudoHeader{
				Src:  netip.AddrPortFrom(netip.MustParseAddr(a.src), uint16(rng.Uint32())),
				Dst:  netip.AddrPortFrom(netip.MustParseAddr(a.dst), 4791),
				IPID: uint16(rng.Uint32()),
			}
			hdr := buildIPUDP(ph.Src, ph.Dst, ph.IPID, uint8(rng.Uint32()), uint8(rng.Uint32()), rng.Uint32(), uint16(rng.Uint32()), n)
			want := refICRC(hdr, pkt)
			if got := ComputeICRC(ph, pkt); got != want {
				t.Errorf("%s len %d: ComputeICRC = %#08x, want %#08x", a.name, n, got, want)
			}
			if got := ComputeICRCFromHeaders(hdr, pkt); got != want {
				t.Errorf("%s len %d: ComputeICRCFromHeaders = %#08x, want %#08x", a.name, n, got, want)
			}
		}
	}
}

func TestICRCIPv4Mapped(t *testing.T) {
	pkt := make([]byte, 44)
	for i := range pkt {
		pkt[i] = byte(i * 3)
	}
	plain := &PseudoHeader{
		Src: netip.MustParseAddrPort("192.0.2.1:49153"),
		Dst: netip.MustParseAddrPort("192.0.2.2:4791"),
	}
	mapped := &PseudoHeader{
		Src: netip.MustParseAddrPort("[::ffff:192.0.2.1]:49153"),
		Dst: netip.MustParseAddrPort("[::ffff:192.0.2.2]:4791"),
	}
	if a, b := ComputeICRC(plain, pkt), ComputeICRC(mapped, pkt); a != b {
		t.Errorf("v4-mapped ICRC %#08x != IPv4 ICRC %#08x", b, a)
	}
	v6 := &PseudoHeader{Src: netip.MustParseAddrPort("[2001:db8::1]:49153"), Dst: plain.Dst}
	if a, b := ComputeICRC(plain, pkt), ComputeICRC(v6, pkt); a == b {
		t.Errorf("IPv6 and IPv4 ICRCs agree (%#08x)", a)
	}
	// A mismatched family or zero addresses must not panic.
	_ = ComputeICRC(&PseudoHeader{Src: plain.Src, Dst: v6.Src}, pkt)
	_ = ComputeICRC(&PseudoHeader{}, pkt)
	_ = ComputeICRC(&PseudoHeader{}, nil)
}

func TestICRCDoesNotModifyInput(t *testing.T) {
	hdr := buildIPUDP(netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[2001:db8::2]:4791"), 0, 0x12, 3, 0x12345, 0x1111, 20)
	pkt := bytes.Repeat([]byte{0x42}, 20)
	h0, p0 := bytes.Clone(hdr), bytes.Clone(pkt)
	ComputeICRCFromHeaders(hdr, pkt)
	ComputeICRC(&PseudoHeader{}, pkt)
	if !bytes.Equal(hdr, h0) || !bytes.Equal(pkt, p0) {
		t.Error("input modified")
	}
}

func TestCRCUpdate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 200)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 70; n++ {
		for _, off := range []int{0, 1, 3, 7} {
			seed := rng.Uint32()
			p := buf[off : off+n]
			if got, want := crcUpdate(seed, p), crc32.Update(seed, crc32.IEEETable, p); got != want {
				t.Fatalf("crcUpdate(%#x, %d bytes at %d) = %#x, want %#x", seed, n, off, got, want)
			}
		}
	}
	// The rxe seed is the CRC register after 8 bytes of 0xFF.
	if got := ^crcAfterFF; got != 0xdebb20e3 {
		t.Errorf("register after 8x 0xFF = %#x, want 0xdebb20e3", got)
	}
}

func TestPutICRC(t *testing.T) {
	b := make([]byte, 6)
	PutICRC(b[1:], 0x644e49a8)
	if want := []byte{0, 0xa8, 0x49, 0x4e, 0x64, 0}; !bytes.Equal(b, want) {
		t.Errorf("PutICRC wrote % x, want % x", b, want)
	}
	if got := ICRCOf(b[1:]); got != 0x644e49a8 {
		t.Errorf("ICRCOf = %#x", got)
	}
}

func TestICRCFromParts(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:4791")
	pkt := make([]byte, 4096+RETHLen+BTHLen)
	for i := range pkt {
		pkt[i] = byte(i * 7)
	}
	ipUDP := buildIPUDP(src, dst, 0, 0, 64, 0, 0, len(pkt)+ICRCLen)
	want := ComputeICRCFromHeaders(ipUDP, pkt)
	for _, cut := range []int{BTHLen, BTHLen + RETHLen, 100, len(pkt)} {
		if got := ComputeICRCFromParts(ipUDP, pkt[:cut], pkt[cut:]); got != want {
			t.Errorf("cut at %d: ICRC %#x, want %#x", cut, got, want)
		}
	}
	if got := ComputeICRCFromParts(ipUDP, pkt[:BTHLen], pkt[BTHLen+1:]); got == want {
		t.Error("a byte left out gave the same ICRC")
	}
}
