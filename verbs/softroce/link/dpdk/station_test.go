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
	n, _ := me.arpInput(req[:], tb, now, reply[:])
	if n != arpFrameLen {
		t.Fatal("no reply to a request for our address")
	}
	a := wire.ARP(reply[wire.EthernetLen:])
	if wire.Ethernet(reply[:]).Dst() != peer.mac || a.Op() != wire.ARPReply || a.SenderMAC() != me.mac ||
		a.SenderIP() != me.ip || a.TargetMAC() != peer.mac || a.TargetIP() != peer.ip {
		t.Fatalf("reply %x", reply)
	}
	if _, st := tb.lookup(peer.ip, now); st != neighNone {
		t.Fatal("a request made an entry for its sender")
	}
	// The reply, seen by the peer that asked, teaches it our MAC.
	tp := newNeighTable()
	if n, learned := peer.arpInput(reply[:], tp, now, req[:]); n != 0 || learned {
		t.Fatal("a reply nobody asked for was answered or taken")
	}
	tp.ask(me.ip, now)
	if n, learned := peer.arpInput(reply[:], tp, now, req[:]); n != 0 || !learned {
		t.Fatal("a reply was answered, or the answer not taken")
	}
	if mac, st := tp.lookup(me.ip, now); st != neighReachable || mac != me.mac {
		t.Fatal("the reply was not learnt")
	}
	// A request for someone else is not answered and creates no entry.
	other := station{mac: wire.MAC{2, 0, 0, 0, 0, 3}, ip: netip.MustParseAddr("192.0.2.3")}
	other.arpFrame(req[:], wire.ARPRequest, wire.MAC{}, peer.ip)
	if n, _ := me.arpInput(req[:], tb, now, reply[:]); n != 0 {
		t.Fatal("answered a request for another address")
	}
	if _, st := tb.lookup(other.ip, now); st != neighNone {
		t.Fatal("a request for another address created an entry")
	}
}

// TestARPForged: forged ARP does not move an entry learnt from an answer
// to our request: not a reply nobody asked for, not a second reply, not a
// gratuitous ARP (it only makes the entry stale, to be asked again);
// replies to a flood of requests are rate-limited; and no frame allocates.
func TestARPForged(t *testing.T) {
	tb := newNeighTable()
	now := time.Unix(100, 0)
	var f, reply [arpFrameLen]byte
	tb.ask(peer.ip, now)
	peer.arpFrame(f[:], wire.ARPReply, me.mac, me.ip)
	if _, learned := me.arpInput(f[:], tb, now, reply[:]); !learned {
		t.Fatal("the answer was not taken")
	}
	attacker := station{mac: wire.MAC{2, 0, 0, 0, 0, 0x66}, ip: peer.ip}
	attacker.arpFrame(f[:], wire.ARPReply, me.mac, me.ip)
	if _, learned := me.arpInput(f[:], tb, now.Add(time.Millisecond), reply[:]); learned {
		t.Fatal("a second reply was taken")
	}
	// Gratuitous ARP: sender and target are the claimed address.
	attacker.arpFrame(f[:], wire.ARPRequest, wire.MAC{}, peer.ip)
	me.arpInput(f[:], tb, now.Add(2*time.Millisecond), reply[:])
	if mac, st := tb.lookup(peer.ip, now.Add(3*time.Millisecond)); mac != peer.mac || st != neighStale {
		t.Fatalf("after a gratuitous ARP of another MAC: %v %v, want the peer's, stale", mac, st)
	}
	// A request from the attacker claiming the peer's address, for us.
	attacker.arpFrame(f[:], wire.ARPRequest, wire.MAC{}, me.ip)
	if mac, _ := tb.lookup(peer.ip, now.Add(4*time.Millisecond)); mac != peer.mac {
		t.Fatalf("a request moved the entry to %v", mac)
	}
	// A flood of requests for us at one instant: at most a burst of replies.
	tf := newNeighTable()
	peer.arpFrame(f[:], wire.ARPRequest, wire.MAC{}, me.ip)
	replies := 0
	for range 1000 {
		if n, _ := me.arpInput(f[:], tf, now, reply[:]); n > 0 {
			replies++
		}
	}
	if replies == 0 || replies > replyBurst {
		t.Errorf("%d replies to 1000 requests at once, want 1 to %d", replies, replyBurst)
	}
	i := 0
	if a := testing.AllocsPerRun(500, func() {
		i++
		me.arpInput(f[:], tf, now.Add(time.Duration(i)*time.Millisecond), reply[:])
		attacker.arpFrame(f[:], wire.ARPReply, me.mac, me.ip)
		me.arpInput(f[:], tb, now.Add(time.Duration(i)*time.Millisecond), reply[:])
		peer.arpFrame(f[:], wire.ARPRequest, wire.MAC{}, me.ip)
	}); a != 0 {
		t.Errorf("%v allocations per frame", a)
	}
}

// FuzzStation feeds any frame to classification and ARP handling.
func FuzzStation(f *testing.F) {
	var req [arpFrameLen]byte
	peer.arpFrame(req[:], wire.ARPRequest, wire.MAC{}, me.ip)
	f.Add(req[:])
	f.Add(roceFrame(f, me.mac, me.ip))
	f.Fuzz(func(t *testing.T, b []byte) {
		if kind, _ := me6.classify(b); kind == frameND {
			var reply [ndFrameLen]byte
			tb := newNeighTable()
			tb.ask(peer6.ip, time.Unix(1, 0))
			if n, _ := me6.ndInput(b, tb, time.Unix(1, 0), reply[:]); n != 0 && n != ndFrameLen {
				t.Fatalf("advertisement of %d bytes", n)
			}
		}
		kind, fr := me.classify(b)
		switch kind {
		case frameARP:
			var reply [arpFrameLen]byte
			tb := newNeighTable()
			if n, _ := me.arpInput(b, tb, time.Unix(1, 0), reply[:]); n != 0 && n != arpFrameLen {
				t.Fatalf("reply of %d bytes", n)
			}
		case frameND:
			t.Fatal("an IPv4 station read neighbour discovery")
		case frameRoCE:
			if fr.Dst != me.ip || len(fr.Pkt) < wire.BTHLen+wire.ICRCLen {
				t.Fatalf("accepted %+v", fr)
			}
		}
	})
}
