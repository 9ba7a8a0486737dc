package wire

import (
	"net/netip"
	"testing"
)

func TestIPv6Encode(t *testing.T) {
	b := make(IPv6, IPv6Len+8)
	f := IPv6Fields{TrafficClass: 0xa5, FlowLabel: 0x1abcde, PayloadLen: 8, NextHeader: IPProtoUDP, HopLimit: 64,
		Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("10.1.2.3")}
	b.Encode(&f)
	if b.Version() != 6 || b.TrafficClass() != 0xa5 || b.FlowLabel() != 0xabcde || b.PayloadLen() != 8 ||
		b.NextHeader() != IPProtoUDP || b.HopLimit() != 64 || b.Src() != f.Src ||
		b.Dst() != netip.MustParseAddr("::ffff:10.1.2.3") {
		t.Fatalf("fields: % x", []byte(b))
	}
	if !b.IsValid(len(b)) || b.IsValid(len(b)-1) || len(b.Payload()) != 8 {
		t.Fatal("IsValid/Payload")
	}
	b[0] = 0x45
	if b.IsValid(len(b)) {
		t.Fatal("version 4 is valid")
	}
}

func FuzzIPv6(f *testing.F) {
	seed := make(IPv6, IPv6Len+8)
	seed.Encode(&IPv6Fields{PayloadLen: 8, NextHeader: IPProtoUDP, Src: netip.IPv6Loopback(), Dst: netip.IPv6Loopback()})
	f.Add([]byte(seed))
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		ip := IPv6(b)
		if !ip.IsValid(len(b)) {
			return
		}
		if !within(ip.Payload(), b) {
			t.Fatal("payload outside input")
		}
		_, _, _, _ = ip.TrafficClass(), ip.FlowLabel(), ip.Src(), ip.Dst()
	})
}
