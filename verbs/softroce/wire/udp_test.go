package wire

import (
	"net/netip"
	"testing"
)

func TestUDPVectors(t *testing.T) {
	frames, names := loadVectors(t)
	for _, name := range names {
		fr := frames[name]
		u := UDP(fr[EthernetLen+IPv4MinLen:])
		if !u.IsValid(len(u)) || u.DstPort() != vecDstPort || u.SrcPort() != vecSrcPort {
			t.Errorf("%s: ports %d->%d length %d", name, u.SrcPort(), u.DstPort(), u.Length())
		}
		if len(u.Payload()) != len(u)-UDPLen {
			t.Errorf("%s: payload %d of %d", name, len(u.Payload()), len(u))
		}
	}
}

func TestUDPChecksum(t *testing.T) {
	for _, pair := range [][2]string{{"10.0.0.1", "10.0.0.2"}, {"fd00::1", "fd00::2"}} {
		src, dst := netip.MustParseAddr(pair[0]), netip.MustParseAddr(pair[1])
		for _, n := range []int{0, 1, 13, 64} {
			u := make(UDP, UDPLen+n)
			for i := range n {
				u[UDPLen+i] = byte(i*7 + 1)
			}
			u.Encode(0xc001, 4791, uint16(len(u)), 0)
			u.SetChecksum(u.CalculateChecksum(src, dst))
			// Verification: pseudo header plus datagram sum to all ones.
			var s uint32
			if src.Is4() {
				a, b := src.As4(), dst.As4()
				s = ChecksumUpdate(ChecksumUpdate(s, a[:]), b[:])
			} else {
				a, b := src.As16(), dst.As16()
				s = ChecksumUpdate(ChecksumUpdate(s, a[:]), b[:])
			}
			s += IPProtoUDP + uint32(len(u))
			if c := ChecksumFold(ChecksumUpdate(s, u)); c != 0 {
				t.Errorf("%v n=%d: verification sum %#x", src, n, c)
			}
		}
	}
}

func TestUDPIsValid(t *testing.T) {
	u := make(UDP, 16)
	u.Encode(1, 2, 16, 0)
	if !u.IsValid(16) || u.IsValid(15) {
		t.Fatal("length 16")
	}
	u.Encode(1, 2, 7, 0)
	if u.IsValid(16) {
		t.Fatal("length 7 is valid")
	}
	if UDP(make([]byte, 7)).IsValid(100) {
		t.Fatal("7-byte view is valid")
	}
}

func FuzzUDP(f *testing.F) {
	frames, names := loadVectors(f)
	for _, name := range names {
		f.Add(frames[name][EthernetLen+IPv4MinLen:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u := UDP(b)
		if !u.IsValid(len(b)) {
			return
		}
		if !within(u.Payload(), b) {
			t.Fatal("payload outside input")
		}
		_ = u.CalculateChecksum(netip.IPv6Loopback(), netip.IPv6Loopback())
	})
}
