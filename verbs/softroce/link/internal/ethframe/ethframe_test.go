package ethframe

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

var (
	addrA = netip.MustParseAddrPort("192.0.2.1:4791")
	addrB = netip.MustParseAddrPort("192.0.2.2:4791")
	macA  = wire.MAC{2, 0, 0, 0, 0, 1}
	macB  = wire.MAC{2, 0, 0, 0, 0, 2}
)

// mkPkt returns an n-byte packet whose first bytes look like a BTH.
func mkPkt(n int, seed byte) []byte {
	b := make([]byte, n, n+wire.ICRCLen)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

// frame builds a whole frame from src to dst as a link sends it.
func frame(t testing.TB, src, dst netip.AddrPort, pkt []byte) []byte {
	e := Ends{SrcMAC: macB, DstMAC: macA, Src: src, Dst: dst}
	var h [MaxHeaderLen]byte
	var icrc [wire.ICRCLen]byte
	hl, err := Headers(h[:], &e, pkt, &icrc)
	if err != nil {
		t.Fatal(err)
	}
	return append(append(append([]byte(nil), h[:hl]...), pkt...), icrc[:]...)
}

func TestUDP6Checksum(t *testing.T) {
	src := netip.MustParseAddrPort("[fd00::1]:4791")
	dst := netip.MustParseAddrPort("[fd00::2]:4791")
	for _, n := range []int{12, 13, 14, 15, 101} {
		f := frame(t, src, dst, mkPkt(n, byte(n)))
		u := wire.UDP(f[wire.EthernetLen+wire.IPv6Len:])
		got := u.Checksum()
		u.SetChecksum(0)
		if want := u.CalculateChecksum(src.Addr(), dst.Addr()); got != want {
			t.Fatalf("n=%d: %#x, want %#x", n, got, want)
		}
	}
}

func TestIPv4Header(t *testing.T) {
	f := frame(t, addrB, addrA, mkPkt(50, 1))
	ip := wire.IPv4(f[wire.EthernetLen:])
	if !ip.ChecksumValid() || ip.ID() != 0 || ip.Flags() != wire.IPv4DontFragment || wire.UDP(ip.Payload()).Checksum() != 0 {
		t.Fatalf("IPv4 header %x", []byte(ip[:wire.IPv4MinLen]))
	}
	if e := wire.Ethernet(f); e.Dst() != macA || e.Src() != macB {
		t.Fatalf("Ethernet header %x", f[:wire.EthernetLen])
	}
	if _, err := EncodeHeaders(make([]byte, MaxHeaderLen), &Ends{Src: addrA, Dst: netip.MustParseAddrPort("[::1]:4791")}, 20); err == nil {
		t.Fatal("mixed IP versions accepted")
	}
}

func TestDecode(t *testing.T) {
	pkt := mkPkt(50, 1)
	f := frame(t, addrB, addrA, pkt)
	fr, ok := Decode(f)
	if !ok || fr.Src != addrB || fr.Dst != addrA.Addr() || len(fr.Pkt) != len(pkt)+wire.ICRCLen ||
		len(fr.IPUDP) != wire.IPv4MinLen+wire.UDPLen {
		t.Fatalf("decode: ok %v frame %+v", ok, fr)
	}
	var p link.Packet
	Deliver(&p, &fr)
	if p.ICRC != link.ICRCGood || !bytes.Equal(p.Bytes(), pkt) || p.Addr != addrB {
		t.Fatalf("deliver: %v %v", p.ICRC, p.Addr)
	}
	bad := append([]byte(nil), f...)
	bad[len(bad)-10] ^= 1
	fr, _ = Decode(bad)
	if Deliver(&p, &fr); p.ICRC != link.ICRCBad {
		t.Fatal("corrupted payload passed the ICRC")
	}
	// Ethernet padding after the IP datagram is ignored.
	padded := append(append([]byte(nil), f...), 0, 0, 0, 0)
	if fr, ok := Decode(padded); !ok || len(fr.Pkt) != len(pkt)+wire.ICRCLen {
		t.Fatal("padded frame")
	}
	frag := append([]byte(nil), f...)
	frag[wire.EthernetLen+6] |= 0x20 // MF
	port := append([]byte(nil), f...)
	port[wire.EthernetLen+wire.IPv4MinLen+3] = 1 // UDP port 4609
	for name, b := range map[string][]byte{"fragment": frag, "port": port, "short": f[:30]} {
		if _, ok := Decode(b); ok {
			t.Fatalf("%s accepted", name)
		}
	}
}

// inside reports whether v is a slice of b.
func inside(v, b []byte) bool {
	if len(v) == 0 {
		return true
	}
	for i := range len(b) - len(v) + 1 {
		if &b[i] == &v[0] {
			return true
		}
	}
	return false
}

// FuzzDecode checks that whatever a peer puts in a frame, decoding
// returns views inside it and the ICRC check runs without fault.
func FuzzDecode(f *testing.F) {
	f.Add(frame(f, addrB, addrA, mkPkt(40, 1)))
	f.Add(frame(f, netip.MustParseAddrPort("[::1]:4791"), netip.MustParseAddrPort("[::2]:4791"), mkPkt(41, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, ok := Decode(b)
		if !ok {
			return
		}
		if !inside(fr.IPUDP, b) || !inside(fr.Pkt, b) || len(fr.Pkt) < wire.BTHLen+wire.ICRCLen {
			t.Fatal("views outside the frame")
		}
		var p link.Packet
		Deliver(&p, &fr)
		if cap(p.Buf) < p.N+wire.ICRCLen {
			t.Fatal("delivered buffer too short for the ICRC")
		}
	})
}

// splitFrame runs DeliverSplit on frame as the memif link does: its first
// bytes copied into a buffer of its own.
func splitFrame(p *link.Packet, frame []byte) bool {
	head := append([]byte(nil), frame[:min(len(frame), SplitHeadLen)]...)
	return DeliverSplit(p, head, frame)
}

// TestDeliverSplit checks that a split delivery gives the packet Deliver
// gives, in two pieces, with the ICRC checked over both.
func TestDeliverSplit(t *testing.T) {
	v6a, v6b := netip.MustParseAddrPort("[2001:db8::1]:49152"), netip.MustParseAddrPort("[2001:db8::2]:4791")
	for _, ends := range [][2]netip.AddrPort{{addrB, addrA}, {v6a, v6b}} {
		for _, op := range []wire.Opcode{wire.RCWriteOnly, wire.RCWriteOnlyImm, wire.RCSendMiddle, wire.RCAcknowledge, wire.RCCompareSwap} {
			for _, n := range []int{0, 4, 1024, 4096} {
				pkt := mkPkt(op.HeaderLen()+n, byte(n))
				pkt[0] = byte(op)
				f := frame(t, ends[0], ends[1], pkt)
				var p link.Packet
				if !splitFrame(&p, f) {
					t.Fatalf("%v %v with %d bytes: not delivered", ends[0].Addr(), op, n)
				}
				if p.ICRC != link.ICRCGood || p.Addr != ends[0] || p.N != op.HeaderLen() || !inside(p.Tail, f) ||
					cap(p.Tail) < len(p.Tail)+wire.ICRCLen {
					t.Fatalf("%v %v with %d bytes: %+v", ends[0].Addr(), op, n, p)
				}
				if got := append(append([]byte(nil), p.Buf[:p.N]...), p.Tail...); !bytes.Equal(got, pkt) {
					t.Fatalf("%v %v with %d bytes: joined pieces differ from the packet", ends[0].Addr(), op, n)
				}
				if DeliverSplit(&p, f[:len(f)-len(pkt)-wire.ICRCLen], f) {
					t.Fatalf("%v %v: a head ending at the UDP header was taken", ends[0].Addr(), op)
				}
				if n > 0 {
					f[len(f)-wire.ICRCLen-1] ^= 1 // a payload byte
					if !splitFrame(&p, f) || p.ICRC != link.ICRCBad {
						t.Fatalf("%v %v: a changed payload byte passed the ICRC", ends[0].Addr(), op)
					}
				}
			}
		}
	}
}

// FuzzDeliverSplit checks DeliverSplit against Decode and Deliver: it
// accepts only what they accept, and gives the same packet and ICRC
// verdict, its pieces inside head and frame.
func FuzzDeliverSplit(f *testing.F) {
	f.Add(frame(f, addrB, addrA, mkPkt(40, 1)))
	pkt := mkPkt(wire.BTHLen+wire.RETHLen+256, 3)
	pkt[0] = byte(wire.RCWriteOnly)
	f.Add(frame(f, addrB, addrA, pkt))
	f.Add(frame(f, netip.MustParseAddrPort("[::1]:4791"), netip.MustParseAddrPort("[::2]:4791"), pkt))
	f.Fuzz(func(t *testing.T, b []byte) {
		head := append([]byte(nil), b[:min(len(b), SplitHeadLen)]...)
		var sp link.Packet
		ok := DeliverSplit(&sp, head, b)
		fr, whole := Decode(b)
		if !ok {
			if whole && wire.Opcode(fr.Pkt[0]).HeaderLen() != 0 && len(fr.Pkt)-wire.ICRCLen >= wire.Opcode(fr.Pkt[0]).HeaderLen() &&
				len(b)-len(fr.Pkt)+wire.Opcode(fr.Pkt[0]).HeaderLen() <= len(head) {
				t.Fatal("Decode accepts a frame whose headers fit, DeliverSplit does not")
			}
			return
		}
		if !whole {
			t.Fatal("DeliverSplit accepts a frame Decode rejects")
		}
		if !inside(sp.Buf[:sp.N], head) || !inside(sp.Tail, b) || cap(sp.Tail) < len(sp.Tail)+wire.ICRCLen {
			t.Fatal("pieces outside head and frame")
		}
		var p link.Packet
		Deliver(&p, &fr)
		joined := append(append([]byte(nil), sp.Buf[:sp.N]...), sp.Tail...)
		if !bytes.Equal(joined, p.Buf[:p.N]) || sp.ICRC != p.ICRC || sp.Addr != p.Addr {
			t.Fatalf("split %x/%v/%v, whole %x/%v/%v", joined, sp.ICRC, sp.Addr, p.Buf[:p.N], p.ICRC, p.Addr)
		}
	})
}

// TestHeadersTail: a packet in two pieces gets the frame headers and the
// ICRC of the same packet in one, over IPv4 and IPv6 (whose UDP checksum
// covers the payload), and odd pieces are refused.
func TestHeadersTail(t *testing.T) {
	v6a, v6b := netip.MustParseAddrPort("[2001:db8::1]:49152"), netip.MustParseAddrPort("[2001:db8::2]:4791")
	for _, ends := range []Ends{{SrcMAC: macA, DstMAC: macB, Src: addrA, Dst: addrB}, {SrcMAC: macA, DstMAC: macB, Src: v6a, Dst: v6b}} {
		pkt := mkPkt(wire.BTHLen+wire.RETHLen+4096, 9)
		var h1, h2 [MaxHeaderLen]byte
		var i1, i2 [wire.ICRCLen]byte
		n1, err1 := Headers(h1[:], &ends, pkt, &i1)
		n2, err2 := HeadersTail(h2[:], &ends, pkt[:wire.BTHLen+wire.RETHLen], pkt[wire.BTHLen+wire.RETHLen:], &i2)
		if err1 != nil || err2 != nil || n1 != n2 || h1 != h2 || i1 != i2 {
			t.Fatalf("%v: whole %d %v % x, in pieces %d %v % x", ends.Src.Addr(), n1, err1, i1, n2, err2, i2)
		}
		if _, err := HeadersTail(h2[:], &ends, pkt[:13], pkt[13:], &i2); err == nil {
			t.Fatalf("%v: odd pieces accepted", ends.Src.Addr())
		}
	}
}

// TestDecodeECN sets each ECN codepoint in the IPv4 TOS (fixing the
// header checksum) and the IPv6 traffic class of a frame, as a marking
// router would, and checks that Deliver reports it, with the ICRC still
// good (it masks those bits), whole and split.
func TestDecodeECN(t *testing.T) {
	v6a := netip.MustParseAddrPort("[fd00::1]:4791")
	v6b := netip.MustParseAddrPort("[fd00::2]:4791")
	for _, e := range []link.ECN{link.ECNNotECT, link.ECNECT1, link.ECNECT0, link.ECNCE} {
		for _, v6 := range []bool{false, true} {
			pkt := mkPkt(64, 3)
			var f []byte
			if v6 {
				f = frame(t, v6b, v6a, pkt)
				f[wire.EthernetLen+1] |= byte(e) << 4 // the traffic class's low bits
			} else {
				f = frame(t, addrB, addrA, pkt)
				ip := wire.IPv4(f[wire.EthernetLen:])
				ip[1] |= byte(e)
				ip.SetChecksum(ip.CalculateChecksum())
			}
			fr, ok := Decode(f)
			if !ok {
				t.Fatalf("ECN %d, IPv6 %v: not decoded", e, v6)
			}
			var p link.Packet
			Deliver(&p, &fr)
			if p.ECN != e || p.ICRC != link.ICRCGood {
				t.Errorf("ECN %d, IPv6 %v: delivered with ECN %d, ICRC %v", e, v6, p.ECN, p.ICRC)
			}
			var q link.Packet
			if !DeliverSplit(&q, f[:SplitHeadLen], f) || q.ECN != e || q.ICRC != link.ICRCGood {
				t.Errorf("ECN %d, IPv6 %v: split delivery with ECN %d, ICRC %v", e, v6, q.ECN, q.ICRC)
			}
		}
	}
}
