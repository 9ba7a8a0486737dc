package dpdk

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link/internal/ethframe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

var (
	me   = station{mac: wire.MAC{2, 0, 0, 0, 0, 1}, ip: netip.MustParseAddr("192.0.2.1")}
	peer = station{mac: wire.MAC{2, 0, 0, 0, 0, 2}, ip: netip.MustParseAddr("192.0.2.2")}
	// me6 and peer6 are the same on IPv6.
	me6   = station{mac: me.mac, ip: netip.MustParseAddr("fd00::1")}
	peer6 = station{mac: peer.mac, ip: netip.MustParseAddr("fd00::2")}
)

// roceFrame is a frame from peer to dstMAC/dstIP carrying a 40-byte packet.
func roceFrame(t testing.TB, dstMAC wire.MAC, dstIP netip.Addr) []byte {
	pkt := make([]byte, 40, 44)
	var h [ethframe.MaxHeaderLen]byte
	var icrc [wire.ICRCLen]byte
	e := ethframe.Ends{SrcMAC: peer.mac, DstMAC: dstMAC, Src: netip.AddrPortFrom(peer.ip, 4791), Dst: netip.AddrPortFrom(dstIP, 4791)}
	hl, err := ethframe.Headers(h[:], &e, pkt, &icrc)
	if err != nil {
		t.Fatal(err)
	}
	return append(append(h[:hl:hl], pkt...), icrc[:]...)
}

func TestClassify(t *testing.T) {
	var req [arpFrameLen]byte
	peer.arpFrame(req[:], wire.ARPRequest, wire.MAC{}, me.ip)
	for _, c := range []struct {
		name string
		f    []byte
		want frameKind
	}{
		{"roce", roceFrame(t, me.mac, me.ip), frameRoCE},
		{"roce to another MAC", roceFrame(t, peer.mac, me.ip), frameOther},
		{"roce to another IP", roceFrame(t, me.mac, peer.ip), frameOther},
		{"roce broadcast", roceFrame(t, wire.BroadcastMAC, me.ip), frameOther},
		{"arp request", req[:], frameARP},
		{"short", req[:10], frameOther},
		{"truncated arp", req[:20], frameOther},
	} {
		if got, _ := me.classify(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestARP(t *testing.T) {
	tb := newNeighTable()
	now := time.Unix(100, 0)
	var req, reply [arpFrameLen]byte
	peer.arpFrame(req[:], wire.ARPRequest, wire.MAC{}, me.ip)
	if e := wire.Ethernet(req[:]); e.Dst() != wire.BroadcastMAC || e.EtherType() != wire.EtherTypeARP {
		t.Fatalf("request header %x", req[:wire.EthernetLen])
	}
	n := me.arpInput(req[:], tb, now, reply[:])
	if n != arpFrameLen {
		t.Fatal("no reply to a request for our address")
	}
	a := wire.ARP(reply[wire.EthernetLen:])
	if wire.Ethernet(reply[:]).Dst() != peer.mac || a.Op() != wire.ARPReply || a.SenderMAC() != me.mac ||
		a.SenderIP() != me.ip || a.TargetMAC() != peer.mac || a.TargetIP() != peer.ip {
		t.Fatalf("reply %x", reply)
	}
	if mac, st := tb.lookup(peer.ip, now); st != neighReachable || mac != peer.mac {
		t.Fatal("the requester was not learnt")
	}
	// The reply, seen by the peer, teaches it our MAC.
	tp := newNeighTable()
	tp.ask(me.ip, now)
	if peer.arpInput(reply[:], tp, now, req[:]) != 0 {
		t.Fatal("a reply was answered")
	}
	if mac, st := tp.lookup(me.ip, now); st != neighReachable || mac != me.mac {
		t.Fatal("the reply was not learnt")
	}
	// A request for someone else is not answered and creates no entry.
	other := station{mac: wire.MAC{2, 0, 0, 0, 0, 3}, ip: netip.MustParseAddr("192.0.2.3")}
	other.arpFrame(req[:], wire.ARPRequest, wire.MAC{}, peer.ip)
	if me.arpInput(req[:], tb, now, reply[:]) != 0 {
		t.Fatal("answered a request for another address")
	}
	if _, st := tb.lookup(other.ip, now); st != neighNone {
		t.Fatal("a request for another address created an entry")
	}
}

// FuzzStation feeds any frame to classification and ARP handling.
func FuzzStation(f *testing.F) {
	var req [arpFrameLen]byte
	peer.arpFrame(req[:], wire.ARPRequest, wire.MAC{}, me.ip)
	f.Add(req[:])
	f.Add(roceFrame(f, me.mac, me.ip))
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, fr := me.classify(b)
		switch kind {
		case frameARP:
			var reply [arpFrameLen]byte
			tb := newNeighTable()
			if n := me.arpInput(b, tb, time.Unix(1, 0), reply[:]); n != 0 && n != arpFrameLen {
				t.Fatalf("reply of %d bytes", n)
			}
		case frameRoCE:
			if fr.Dst != me.ip || len(fr.Pkt) < wire.BTHLen+wire.ICRCLen {
				t.Fatalf("accepted %+v", fr)
			}
		}
	})
}
