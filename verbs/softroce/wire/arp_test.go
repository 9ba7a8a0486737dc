package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// A request from 192.0.2.1 (02:00:00:00:00:01) for 192.0.2.2, as tcpdump
// shows it: "ARP, Request who-has 192.0.2.2 tell 192.0.2.1".
var arpRequest = []byte{
	0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01,
	0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 192, 0, 2, 1,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 192, 0, 2, 2,
}

func TestARP(t *testing.T) {
	a := ARP(arpRequest)
	if !a.IsValid() || a.Op() != ARPRequest || a.SenderMAC() != (MAC{2, 0, 0, 0, 0, 1}) ||
		a.SenderIP() != netip.MustParseAddr("192.0.2.1") || a.TargetIP() != netip.MustParseAddr("192.0.2.2") ||
		a.TargetMAC() != (MAC{}) {
		t.Fatalf("decoded %x wrongly", arpRequest)
	}
	out := make(ARP, ARPLen)
	out.Encode(ARPRequest, a.SenderMAC(), a.SenderIP(), MAC{}, a.TargetIP())
	if !bytes.Equal(out, arpRequest) {
		t.Fatalf("encoded %x, want %x", []byte(out), arpRequest)
	}
	for _, bad := range [][]byte{arpRequest[:ARPLen-1], append([]byte{0, 6}, arpRequest[2:]...), append(append([]byte{}, arpRequest[:5]...), append([]byte{16}, arpRequest[6:]...)...)} {
		if ARP(bad).IsValid() {
			t.Fatalf("%x is valid", bad)
		}
	}
}

// FuzzARP checks that any bytes either fail IsValid or decode without
// fault and re-encode to the same packet.
func FuzzARP(f *testing.F) {
	f.Add(arpRequest)
	f.Fuzz(func(t *testing.T, b []byte) {
		a := ARP(b)
		if !a.IsValid() {
			return
		}
		out := make(ARP, ARPLen)
		out.Encode(a.Op(), a.SenderMAC(), a.SenderIP(), a.TargetMAC(), a.TargetIP())
		if !bytes.Equal(out, b[:ARPLen]) {
			t.Fatalf("re-encoded %x, want %x", []byte(out), b[:ARPLen])
		}
	})
}
