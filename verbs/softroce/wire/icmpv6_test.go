package wire

import (
	"encoding/hex"
	"net/netip"
	"testing"
)

// Neighbour discovery frames captured from Linux 6.18 on a veth pair
// (fd00:99::a at 02:00:00:00:00:0a, fd00:99::b at 02:00:00:00:00:0b):
// a's solicitation for b and b's advertisement in answer.
const (
	linuxNS = "3333ff00000b02000000000a86dd6000000000203afffd00009900000000000000000000000aff0200000000000000000001ff00000b87007c4100000000fd00009900000000000000000000000b010102000000000a"
	linuxNA = "02000000000a02000000000b86dd6000000000203afffd00009900000000000000000000000bfd00009900000000000000000000000a88001aab60000000fd00009900000000000000000000000b020102000000000b"
)

// ndFrame decodes one of the captured frames and returns its IPv6
// header and ICMPv6 message.
func ndFrame(t testing.TB, h string) (IPv6, ICMPv6) {
	f, err := hex.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	ip := IPv6(f[EthernetLen:])
	if !ip.IsValid(len(ip)) || ip.NextHeader() != IPProtoICMPv6 {
		t.Fatalf("not ICMPv6: %x", f)
	}
	return ip, ICMPv6(ip.Payload())
}

func TestICMPv6Checksum(t *testing.T) {
	for _, h := range []string{linuxNS, linuxNA} {
		ip, m := ndFrame(t, h)
		if !m.ChecksumValid(ip.Src(), ip.Dst()) {
			t.Errorf("Linux's checksum %#04x rejected", m.Checksum())
		}
		want := m.Checksum()
		m.SetChecksum(ip.Src(), ip.Dst())
		if m.Checksum() != want {
			t.Errorf("SetChecksum wrote %#04x, Linux %#04x", m.Checksum(), want)
		}
		if m.ChecksumValid(ip.Src(), netip.MustParseAddr("fd00:99::c")) {
			t.Error("checksum accepted with another destination")
		}
		m[len(m)-1] ^= 1
		if m.ChecksumValid(ip.Src(), ip.Dst()) {
			t.Error("checksum accepted after a bit flip")
		}
	}
}

func TestICMPv6Encode(t *testing.T) {
	m := ICMPv6{0xff, 0xff, 0xff, 0xff, 9}
	m.Encode(ICMPv6NeighborAdvert, 0)
	if m.Type() != ICMPv6NeighborAdvert || m.Code() != 0 || m.Checksum() != 0 || len(m.Body()) != 1 || m.Body()[0] != 9 {
		t.Fatalf("Encode: % x", []byte(m))
	}
}

func TestNDPNoAllocs(t *testing.T) {
	ip, m := ndFrame(t, linuxNA)
	src, dst := ip.Src(), ip.Dst()
	if n := testing.AllocsPerRun(100, func() {
		m.SetChecksum(src, dst)
		na := NDPNeighborAdvert(m.Body())
		na.Options().LinkLayerAddress(NDPOptionTargetLinkLayer)
		_ = na.TargetAddress()
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
