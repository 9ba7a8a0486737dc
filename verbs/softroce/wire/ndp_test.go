package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestNDPNeighborSolicitVector(t *testing.T) {
	ip, m := ndFrame(t, linuxNS)
	if m.Type() != ICMPv6NeighborSolicit || m.Code() != 0 {
		t.Fatalf("type %d code %d", m.Type(), m.Code())
	}
	ns := NDPNeighborSolicit(m.Body())
	target := netip.MustParseAddr("fd00:99::b")
	if ns.TargetAddress() != target {
		t.Errorf("target %v", ns.TargetAddress())
	}
	if ip.Dst() != SolicitedNodeAddr(target) {
		t.Errorf("sent to %v, SolicitedNodeAddr says %v", ip.Dst(), SolicitedNodeAddr(target))
	}
	if mac, ok := ns.Options().LinkLayerAddress(NDPOptionSourceLinkLayer); !ok || mac != (MAC{2, 0, 0, 0, 0, 0x0a}) {
		t.Errorf("source link-layer address %v %v", mac, ok)
	}
	if _, ok := ns.Options().LinkLayerAddress(NDPOptionTargetLinkLayer); ok {
		t.Error("a target link-layer address found in a solicitation")
	}
	// Encoding the same solicitation gives Linux's bytes.
	out := make(ICMPv6, ICMPv6MinLen+NDPNeighborSolicitMinLen+NDPLinkLayerOptionLen)
	out.Encode(ICMPv6NeighborSolicit, 0)
	o := NDPNeighborSolicit(out.Body())
	o.Encode(target)
	o.Options().EncodeLinkLayer(NDPOptionSourceLinkLayer, MAC{2, 0, 0, 0, 0, 0x0a})
	out.SetChecksum(ip.Src(), ip.Dst())
	if !bytes.Equal(out, m) {
		t.Errorf("encoded\n%x, Linux sent\n%x", []byte(out), []byte(m))
	}
}

func TestNDPNeighborAdvertVector(t *testing.T) {
	ip, m := ndFrame(t, linuxNA)
	if m.Type() != ICMPv6NeighborAdvert || m.Code() != 0 {
		t.Fatalf("type %d code %d", m.Type(), m.Code())
	}
	na := NDPNeighborAdvert(m.Body())
	target := netip.MustParseAddr("fd00:99::b")
	if na.TargetAddress() != target || na.Flags() != NDPAdvertSolicited|NDPAdvertOverride {
		t.Errorf("target %v flags %#x", na.TargetAddress(), na.Flags())
	}
	mac, ok := na.Options().LinkLayerAddress(NDPOptionTargetLinkLayer)
	if !ok || mac != (MAC{2, 0, 0, 0, 0, 0x0b}) {
		t.Errorf("target link-layer address %v %v", mac, ok)
	}
	out := make(ICMPv6, ICMPv6MinLen+NDPNeighborAdvertMinLen+NDPLinkLayerOptionLen)
	out.Encode(ICMPv6NeighborAdvert, 0)
	o := NDPNeighborAdvert(out.Body())
	o.Encode(NDPAdvertSolicited|NDPAdvertOverride|0x1f, target) // reserved bits are not written
	o.Options().EncodeLinkLayer(NDPOptionTargetLinkLayer, mac)
	out.SetChecksum(ip.Src(), ip.Dst())
	if !bytes.Equal(out, m) {
		t.Errorf("encoded\n%x, Linux sent\n%x", []byte(out), []byte(m))
	}
}

func TestNDPOptions(t *testing.T) {
	mac := MAC{2, 1, 2, 3, 4, 5}
	for _, c := range []struct {
		name  string
		o     NDPOptions
		valid bool
		found bool
	}{
		{"none", nil, true, false},
		{"one", NDPOptions{1, 1, 2, 1, 2, 3, 4, 5}, true, true},
		{"after a nonce", NDPOptions{14, 1, 9, 9, 9, 9, 9, 9, 1, 1, 2, 1, 2, 3, 4, 5}, true, true},
		{"other type", NDPOptions{2, 1, 2, 1, 2, 3, 4, 5}, true, false},
		{"longer than Ethernet's", NDPOptions{1, 2, 2, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0}, true, false},
		{"zero length", NDPOptions{1, 0, 2, 1, 2, 3, 4, 5}, false, false},
		{"zero length after a good one", NDPOptions{1, 1, 2, 1, 2, 3, 4, 5, 3, 0}, false, false},
		{"truncated", NDPOptions{1, 1, 2, 1, 2}, false, false},
		{"one byte", NDPOptions{1}, false, false},
	} {
		if got := c.o.IsValid(); got != c.valid {
			t.Errorf("%s: IsValid %v, want %v", c.name, got, c.valid)
		}
		got, ok := c.o.LinkLayerAddress(NDPOptionSourceLinkLayer)
		if ok != c.found || (ok && got != mac) {
			t.Errorf("%s: LinkLayerAddress %v %v, want found=%v", c.name, got, ok, c.found)
		}
	}
}

func TestIPv6MulticastMAC(t *testing.T) {
	a := SolicitedNodeAddr(netip.MustParseAddr("2001:db8::12:3456:789a"))
	if want := netip.MustParseAddr("ff02::1:ff56:789a"); a != want {
		t.Errorf("SolicitedNodeAddr = %v, want %v", a, want)
	}
	if got, want := IPv6MulticastMAC(a), (MAC{0x33, 0x33, 0xff, 0x56, 0x78, 0x9a}); got != want {
		t.Errorf("IPv6MulticastMAC = %v, want %v", got, want)
	}
}

// FuzzNDP reads any bytes as an ICMPv6 neighbour discovery message: no
// panic, options within the message, and a checksum that SetChecksum
// makes valid.
func FuzzNDP(f *testing.F) {
	for _, h := range []string{linuxNS, linuxNA} {
		_, m := ndFrame(f, h)
		f.Add([]byte(m))
	}
	f.Add([]byte{135, 0, 0, 0})
	src, dst := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("ff02::1:ff00:2")
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < ICMPv6MinLen {
			return
		}
		m := ICMPv6(b)
		body := m.Body()
		if len(body) >= NDPNeighborSolicitMinLen {
			ns := NDPNeighborSolicit(body)
			_ = ns.TargetAddress()
			o := ns.Options()
			if !within(o, b) {
				t.Fatal("options outside the message")
			}
			_, _ = o.LinkLayerAddress(NDPOptionSourceLinkLayer)
			_ = NDPNeighborAdvert(body).Flags()
		}
		m.SetChecksum(src, dst)
		if !m.ChecksumValid(src, dst) {
			t.Fatalf("checksum %#04x of % x not valid", m.Checksum(), b)
		}
	})
}
