package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestIPv4Vectors(t *testing.T) {
	frames, names := loadVectors(t)
	for _, name := range names {
		fr := frames[name]
		ip := IPv4(fr[EthernetLen:])
		if !ip.IsValid(len(fr) - EthernetLen) {
			t.Fatalf("%s: not valid", name)
		}
		if !ip.ChecksumValid() {
			t.Errorf("%s: checksum %#x, computed %#x", name, ip.Checksum(), ip.CalculateChecksum())
		}
		if ip.Protocol() != IPProtoUDP || ip.HeaderLen() != IPv4MinLen || len(ip.Options()) != 0 {
			t.Errorf("%s: protocol %d header %d", name, ip.Protocol(), ip.HeaderLen())
		}
		if len(ip.Payload()) != int(ip.TotalLen())-IPv4MinLen {
			t.Errorf("%s: payload length %d", name, len(ip.Payload()))
		}
		// Encoding the decoded fields gives back the same 20 bytes.
		out := make(IPv4, IPv4MinLen)
		out.Encode(&IPv4Fields{
			TOS: ip.TOS(), TotalLen: ip.TotalLen(), ID: ip.ID(), Flags: ip.Flags(),
			FragOffset: ip.FragOffset(), TTL: ip.TTL(), Protocol: ip.Protocol(),
			Src: ip.Src(), Dst: ip.Dst(),
		})
		if !bytes.Equal(out, ip[:IPv4MinLen]) {
			t.Errorf("%s: re-encoded %x, want %x", name, []byte(out), []byte(ip[:IPv4MinLen]))
		}
	}
}

func TestIPv4Encode(t *testing.T) {
	b := make(IPv4, IPv4MinLen)
	f := IPv4Fields{TOS: 2, TotalLen: 60, ID: 0x1234, Flags: IPv4DontFragment, FragOffset: 0x1fff | 0x2000,
		TTL: 64, Protocol: IPProtoUDP, Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	b.Encode(&f)
	if b.Version() != 4 || b.HeaderLen() != 20 || b.TOS() != 2 || b.TotalLen() != 60 || b.ID() != 0x1234 ||
		b.Flags() != IPv4DontFragment || b.FragOffset() != 0x1fff || b.TTL() != 64 || b.Protocol() != IPProtoUDP ||
		b.Src() != netip.MustParseAddr("10.0.0.1") || b.Dst() != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("fields: % x", []byte(b))
	}
	if !b.ChecksumValid() {
		t.Fatal("checksum")
	}
	// The whole header, checksum included, sums to all ones.
	if ChecksumFold(ChecksumUpdate(0, b)) != 0 {
		t.Fatal("header does not sum to 0xffff")
	}
}

func TestIPv4IsValid(t *testing.T) {
	b := make(IPv4, 24)
	b.Encode(&IPv4Fields{TotalLen: 24, Src: netip.IPv4Unspecified(), Dst: netip.IPv4Unspecified()})
	cases := []struct {
		name   string
		mod    func(IPv4)
		pktLen int
		want   bool
	}{
		{"ok", func(IPv4) {}, 24, true},
		{"short packet", func(IPv4) {}, 23, false},
		{"version", func(b IPv4) { b[0] = 0x65 }, 24, false},
		{"IHL 4", func(b IPv4) { b[0] = 0x44 }, 24, false},
		{"IHL 6 fits", func(b IPv4) { b[0] = 0x46 }, 24, true},
		{"IHL 7 beyond view", func(b IPv4) { b[0] = 0x47 }, 24, false},
		{"total below header", func(b IPv4) { b[3] = 19 }, 24, false},
	}
	for _, c := range cases {
		v := append(IPv4(nil), b...)
		c.mod(v)
		if got := v.IsValid(c.pktLen); got != c.want {
			t.Errorf("%s: IsValid = %v", c.name, got)
		}
	}
	if IPv4(make([]byte, 19)).IsValid(100) {
		t.Error("19-byte view is valid")
	}
}

func FuzzIPv4(f *testing.F) {
	frames, names := loadVectors(f)
	for _, name := range names {
		f.Add(frames[name][EthernetLen:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ip := IPv4(b)
		if !ip.IsValid(len(b)) {
			return
		}
		_ = ip.Options()
		p := ip.Payload()
		if !within(p, b) {
			t.Fatal("payload outside input")
		}
		_ = ip.ChecksumValid()
		_, _, _, _ = ip.Src(), ip.Dst(), ip.Flags(), ip.FragOffset()
	})
}
