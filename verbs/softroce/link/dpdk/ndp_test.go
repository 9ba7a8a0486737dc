package dpdk

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// ndMessage returns the ICMPv6 message of a neighbour discovery frame
// and checks its headers: from st to (dstMAC, dst), hop limit 255, a
// valid checksum.
func ndMessage(t *testing.T, f []byte, from station, dstMAC wire.MAC, dst netip.Addr) wire.ICMPv6 {
	t.Helper()
	e := wire.Ethernet(f)
	ip := wire.IPv6(f[wire.EthernetLen:])
	if e.Src() != from.mac || e.Dst() != dstMAC || e.EtherType() != wire.EtherTypeIPv6 {
		t.Fatalf("Ethernet %v -> %v type %#x", e.Src(), e.Dst(), e.EtherType())
	}
	if !ip.IsValid(len(ip)) || ip.Src() != from.ip || ip.Dst() != dst || ip.HopLimit() != 255 || ip.NextHeader() != wire.IPProtoICMPv6 {
		t.Fatalf("IPv6 %v -> %v hop limit %d next header %d", ip.Src(), ip.Dst(), ip.HopLimit(), ip.NextHeader())
	}
	m := wire.ICMPv6(ip.Payload())
	if !m.ChecksumValid(ip.Src(), ip.Dst()) {
		t.Fatal("bad ICMPv6 checksum")
	}
	return m
}

// TestND resolves peer6 from me6: me6 solicits, peer6 learns me6 and
// answers, me6 learns peer6 from the advertisement.
func TestND(t *testing.T) {
	now := time.Unix(100, 0)
	mine, theirs := newNeighTable(), newNeighTable()
	if !mine.ask(peer6.ip, now) {
		t.Fatal("no solicitation due")
	}
	var ns, na [ndFrameLen]byte
	n := me6.ndSolicit(ns[:], peer6.ip)
	snm := wire.SolicitedNodeAddr(peer6.ip)
	m := ndMessage(t, ns[:n], me6, wire.IPv6MulticastMAC(snm), snm)
	if m.Type() != wire.ICMPv6NeighborSolicit || wire.NDPNeighborSolicit(m.Body()).TargetAddress() != peer6.ip {
		t.Fatalf("solicitation: type %d", m.Type())
	}
	if k, _ := peer6.classify(ns[:n]); k != frameND {
		t.Fatalf("the peer classifies the solicitation as %v", k)
	}
	if k, _ := (&station{mac: peer6.mac, ip: netip.MustParseAddr("fd00::3")}).classify(ns[:n]); k == frameND {
		t.Fatal("a solicitation for another address's solicited-node group read")
	}
	rn, _ := peer6.ndInput(ns[:n], theirs, now, na[:])
	if rn == 0 {
		t.Fatal("no advertisement for a solicitation of our address")
	}
	if mac, st := theirs.lookup(me6.ip, now); st != neighNone {
		t.Errorf("the peer made an entry %v %v from a solicitation", mac, st)
	}
	m = ndMessage(t, na[:rn], peer6, me6.mac, me6.ip)
	adv := wire.NDPNeighborAdvert(m.Body())
	if mac, ok := adv.Options().LinkLayerAddress(wire.NDPOptionTargetLinkLayer); m.Type() != wire.ICMPv6NeighborAdvert ||
		adv.TargetAddress() != peer6.ip || adv.Flags() != wire.NDPAdvertSolicited|wire.NDPAdvertOverride || !ok || mac != peer6.mac {
		t.Fatalf("advertisement: type %d target %v flags %#x mac %v", m.Type(), adv.TargetAddress(), adv.Flags(), mac)
	}
	if k, _ := me6.classify(na[:rn]); k != frameND {
		t.Fatalf("the advertisement classified as %v", k)
	}
	if n, learned := me6.ndInput(na[:rn], mine, now, ns[:]); n != 0 || !learned {
		t.Error("an advertisement answered, or not taken")
	}
	if mac, st := mine.lookup(peer6.ip, now); st != neighReachable || mac != peer6.mac {
		t.Errorf("learnt %v %v from the advertisement", mac, st)
	}
	// An advertisement nobody asked for creates no entry.
	other := station{mac: wire.MAC{2, 0, 0, 0, 0, 3}, ip: netip.MustParseAddr("fd00::3")}
	rn = other.ndFrame(na[:], wire.ICMPv6NeighborAdvert, me6.mac, me6.ip, other.ip)
	me6.ndInput(na[:rn], mine, now, ns[:])
	if _, st := mine.lookup(other.ip, now); st != neighNone {
		t.Errorf("an unsolicited advertisement made an entry (%v)", st)
	}
}

// TestNDInvalid: what RFC 4861 7.1 says to drop is not read, and what is
// not for us gets no answer.
func TestNDInvalid(t *testing.T) {
	now := time.Unix(100, 0)
	solicit := func() []byte {
		b := make([]byte, ndFrameLen)
		return b[:peer6.ndSolicit(b, me6.ip)]
	}
	for _, c := range []struct {
		name  string
		edit  func(f []byte)
		reply bool
		kind  frameKind
	}{
		{"valid", func([]byte) {}, true, frameND},
		{"hop limit 254", func(f []byte) { f[wire.EthernetLen+7] = 254 }, false, frameOther},
		{"bad checksum", func(f []byte) { f[len(f)-1] ^= 1 }, false, frameOther},
		{"code 1", func(f []byte) { f[wire.EthernetLen+wire.IPv6Len+1] = 1 }, false, frameOther},
		{"zero-length option", func(f []byte) {
			f[len(f)-7] = 0
			fixChecksum(f)
		}, false, frameOther},
		{"another target", func(f []byte) {
			f[len(f)-9] ^= 0xff
			fixChecksum(f)
		}, false, frameND},
		{"duplicate address detection", func(f []byte) {
			clear(f[wire.EthernetLen+8 : wire.EthernetLen+24])
			fixChecksum(f)
		}, false, frameND},
	} {
		f := solicit()
		c.edit(f)
		k, _ := me6.classify(f)
		if k != c.kind {
			t.Errorf("%s: classified %v, want %v", c.name, k, c.kind)
			continue
		}
		if k != frameND {
			continue
		}
		var reply [ndFrameLen]byte
		if n, _ := me6.ndInput(f, newNeighTable(), now, reply[:]); (n > 0) != c.reply {
			t.Errorf("%s: answered %v, want %v", c.name, n > 0, c.reply)
		}
	}
	// An IPv4 station reads no neighbour discovery.
	if k, _ := me.classify(solicit()); k == frameND {
		t.Error("an IPv4 station read a solicitation")
	}
}

// fixChecksum recomputes the ICMPv6 checksum of a neighbour discovery
// frame.
func fixChecksum(f []byte) {
	ip := wire.IPv6(f[wire.EthernetLen:])
	wire.ICMPv6(ip.Payload()).SetChecksum(ip.Src(), ip.Dst())
}

// TestNDForged: an advertisement flagged solicited that answers nothing is
// not taken; one answering our solicitation is, once; a solicitation or
// an unsolicited advertisement claiming a known address for another MAC
// only makes the entry stale; replies to a flood of solicitations are
// rate-limited; and no frame allocates.
func TestNDForged(t *testing.T) {
	now := time.Unix(100, 0)
	tb := newNeighTable()
	var na, reply [ndFrameLen]byte
	n := peer6.ndFrame(na[:], wire.ICMPv6NeighborAdvert, me6.mac, me6.ip, peer6.ip)
	if _, learned := me6.ndInput(na[:n], tb, now, reply[:]); learned {
		t.Fatal("an advertisement answering nothing was taken")
	}
	tb.ask(peer6.ip, now)
	if _, learned := me6.ndInput(na[:n], tb, now, reply[:]); !learned {
		t.Fatal("the answer to our solicitation was not taken")
	}
	attacker := station{mac: wire.MAC{2, 0, 0, 0, 0, 0x66}, ip: peer6.ip}
	n = attacker.ndFrame(na[:], wire.ICMPv6NeighborAdvert, me6.mac, me6.ip, peer6.ip)
	if _, learned := me6.ndInput(na[:n], tb, now.Add(time.Millisecond), reply[:]); learned {
		t.Fatal("a second answer was taken")
	}
	var ns [ndFrameLen]byte
	nn := attacker.ndFrame(ns[:], wire.ICMPv6NeighborSolicit, me6.mac, me6.ip, me6.ip)
	me6.ndInput(ns[:nn], tb, now.Add(2*time.Millisecond), reply[:])
	if mac, st := tb.lookup(peer6.ip, now.Add(3*time.Millisecond)); mac != peer6.mac || st != neighStale {
		t.Fatalf("after a solicitation from another MAC: %v %v, want the peer's, stale", mac, st)
	}
	tf := newNeighTable()
	replies := 0
	for range 1000 {
		if r, _ := me6.ndInput(ns[:nn], tf, now, reply[:]); r > 0 {
			replies++
		}
	}
	if replies == 0 || replies > replyBurst {
		t.Errorf("%d advertisements for 1000 solicitations at once, want 1 to %d", replies, replyBurst)
	}
	i := 0
	if a := testing.AllocsPerRun(500, func() {
		i++
		at := now.Add(time.Duration(i) * time.Millisecond)
		me6.ndInput(ns[:nn], tf, at, reply[:])
		me6.ndInput(na[:n], tb, at, reply[:])
	}); a != 0 {
		t.Errorf("%v allocations per frame", a)
	}
}
