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

// TestUDPChecksum computes the checksum of UDP datagrams that the Linux
// kernel checksummed (testdata/kernel_udp.hex, captured by
// testdata/kernel_udp.sh: IPv4 and IPv6, payloads of 0, 1, 13, 64, 1001
// and 1400 bytes) and compares it with the kernel's.
func TestUDPChecksum(t *testing.T) {
	frames, names := loadHexFrames(t, "testdata/kernel_udp.hex")
	fams := map[bool]int{}
	for _, name := range names {
		fr := frames[name]
		var (
			src, dst netip.Addr
			u        UDP
		)
		switch Ethernet(fr).EtherType() {
		case EtherTypeIPv4:
			ip := IPv4(fr[EthernetLen:])
			src, dst, u = ip.Src(), ip.Dst(), UDP(fr[EthernetLen+ip.HeaderLen():])
		case EtherTypeIPv6:
			ip := IPv6(fr[EthernetLen:])
			src, dst, u = ip.Src(), ip.Dst(), UDP(fr[EthernetLen+IPv6Len:])
		default:
			t.Fatalf("%s: not IPv4 or IPv6", name)
		}
		if !u.IsValid(len(u)) || u.DstPort() != 4791 {
			t.Fatalf("%s: not a UDP datagram to 4791", name)
		}
		fams[src.Is4()]++
		want := u.Checksum()
		if got := u.CalculateChecksum(src, dst); got != want || want == 0 {
			t.Errorf("%s (%d bytes %v -> %v): checksum %#04x, the kernel's %#04x", name, u.Length(), src, dst, got, want)
		}
	}
	if fams[true] == 0 || fams[false] == 0 {
		t.Fatalf("frames of each family: %v", fams)
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
