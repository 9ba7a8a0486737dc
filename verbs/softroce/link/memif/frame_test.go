package memif

import (
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

func TestUDP6Checksum(t *testing.T) {
	src := netip.MustParseAddrPort("[fd00::1]:4791")
	dst := netip.MustParseAddrPort("[fd00::2]:4791")
	cfg := Config{Local: src}
	for _, n := range []int{12, 13, 14, 15, 101} {
		pkt := mkPkt(n, byte(n))
		f := wireFrame(t, &cfg, dst, pkt)
		h := f[:maxHeaderLen]
		got := udp6Checksum(h, pkt, f[len(f)-wire.ICRCLen:])
		u := wire.UDP(f[wire.EthernetLen+wire.IPv6Len:])
		if want := u.CalculateChecksum(src.Addr(), dst.Addr()); got != want {
			t.Fatalf("n=%d: %#x, want %#x", n, got, want)
		}
	}
}

func TestDecodeFrame(t *testing.T) {
	cfg := Config{Local: addrB}
	pkt := mkPkt(50, 1)
	f := wireFrame(t, &cfg, addrA, pkt)
	ipUDP, got, src, ok := decodeFrame(f)
	if !ok || src != addrB || len(got) != len(pkt)+wire.ICRCLen || len(ipUDP) != wire.IPv4MinLen+wire.UDPLen {
		t.Fatalf("decode: ok %v src %v len %d", ok, src, len(got))
	}
	// Ethernet padding after the IP datagram is ignored.
	padded := append(append([]byte(nil), f...), 0, 0, 0, 0)
	if _, got, _, ok := decodeFrame(padded); !ok || len(got) != len(pkt)+wire.ICRCLen {
		t.Fatal("padded frame")
	}
	frag := append([]byte(nil), f...)
	frag[wire.EthernetLen+6] |= 0x20 // MF
	if _, _, _, ok := decodeFrame(frag); ok {
		t.Fatal("fragment accepted")
	}
}

// FuzzDecodeFrame checks that whatever a peer puts in a frame, decoding
// returns views inside it and the ICRC check runs without fault.
func FuzzDecodeFrame(f *testing.F) {
	cfg := Config{Local: addrB}
	f.Add(wireFrame(&testing.T{}, &cfg, addrA, mkPkt(40, 1)))
	cfg6 := Config{Local: netip.MustParseAddrPort("[::1]:4791")}
	f.Add(wireFrame(&testing.T{}, &cfg6, netip.MustParseAddrPort("[::2]:4791"), mkPkt(41, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ipUDP, pkt, _, ok := decodeFrame(b)
		if !ok {
			return
		}
		if !inside(ipUDP, b) || !inside(pkt, b) || len(pkt) < wire.BTHLen+wire.ICRCLen {
			t.Fatal("views outside the frame")
		}
		n := len(pkt) - wire.ICRCLen
		_ = wire.ComputeICRCFromHeaders(ipUDP, pkt[:n]) == wire.ICRCOf(pkt[n:])
	})
}
