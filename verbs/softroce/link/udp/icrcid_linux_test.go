//go:build linux

package udp

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// TestCheckICRCAnyID: over IPv4 a packet whose ICRC matches with some
// IPv4 ID is good when the ID is one a udp link sends (0 to 63), or
// unverified (bad with StrictICRC) for any other ID, as rxe sends; a
// packet whose ICRC matches no ID at all is bad, and so is any mismatch
// over IPv6, where every covered field is known.
func TestCheckICRCAnyID(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	src4, dst4 := netip.MustParseAddrPort("192.0.2.1:50000"), netip.MustParseAddrPort("192.0.2.2:4791")
	src6, dst6 := netip.MustParseAddrPort("[fd00::1]:50000"), netip.MustParseAddrPort("[fd00::2]:4791")
	l4 := &Link{local: dst4, is4: true}
	l4s := &Link{local: dst4, is4: true, strict: true}
	l6 := &Link{local: dst6}
	var s rxScratch
	var bad, badPassed int
	for trial := range 3000 {
		n := []int{28, 44, 1024 + 28, 4096 + 28}[trial%4]
		pkt := make([]byte, n)
		for i := range pkt {
			pkt[i] = byte(r.Uint32())
		}
		id := uint16(r.Uint32())
		if trial%3 == 0 {
			id %= maxSegs
		}
		ph := wire.PseudoHeader{Src: src4, Dst: dst4, IPID: id}
		icrc := wire.ComputeICRC(&ph, pkt)
		want := link.ICRCGood
		if id >= maxSegs {
			want = link.ICRCUnverified
		}
		if got := l4.checkICRC(&s, src4, pkt, icrc, 0); got != want {
			t.Fatalf("n %d, IPv4 ID %d: %v, want %v", n, id, got, want)
		}
		if got := l4s.checkICRC(&s, src4, pkt, icrc, 0); want == link.ICRCUnverified && got != link.ICRCBad {
			t.Fatalf("strict, n %d, IPv4 ID %d: %v, want bad", n, id, got)
		}
		// One to three flipped bits in the packet (not in BTH byte 4,
		// which the ICRC masks): a mismatch that no ID explains but about
		// once in 65,536.
		damaged := append([]byte(nil), pkt...)
		for range 1 + r.IntN(3) {
			i := r.IntN(n - 1)
			if i >= 4 {
				i++
			}
			damaged[i] ^= 1 << r.IntN(8)
		}
		if string(damaged) != string(pkt) {
			if got := l4.checkICRC(&s, src4, damaged, icrc, 0); got != link.ICRCBad {
				t.Fatalf("n %d, IPv4 ID %d, damaged: %v, want bad", n, id, got)
			}
		}
		// Don't-fragment clear: unverified too.
		noDF := wire.ComputeICRCFromHeaders(ipv4UDP(src4, dst4, id, 0, n), pkt)
		if got := l4.checkICRC(&s, src4, pkt, noDF, 0); got != link.ICRCUnverified {
			t.Fatalf("n %d, IPv4 ID %d, without DF: %v, want unverified", n, id, got)
		}
		// A random ICRC: no ID explains it but about once in 32,768.
		bad++
		if l4.checkICRC(&s, src4, pkt, r.Uint32(), 0) != link.ICRCBad {
			badPassed++
		}
		ph6 := wire.PseudoHeader{Src: src6, Dst: dst6}
		icrc6 := wire.ComputeICRC(&ph6, pkt)
		if got := l6.checkICRC(&s, src6, pkt, icrc6, 0); got != link.ICRCGood {
			t.Fatalf("IPv6, n %d: %v, want good", n, got)
		}
		if got := l6.checkICRC(&s, src6, pkt, icrc6^1<<r.IntN(32), 0); got != link.ICRCBad {
			t.Fatalf("IPv6, n %d, wrong ICRC: %v, want bad", n, got)
		}
	}
	if badPassed > 2 {
		t.Errorf("%d of %d random ICRCs were taken as some IPv4 ID's", badPassed, bad)
	}
}

// ipv4UDP returns IPv4 and UDP headers from src to dst for a RoCEv2
// packet of n bytes, with IPv4 ID id and flags.
func ipv4UDP(src, dst netip.AddrPort, id uint16, flags uint8, n int) []byte {
	h := make([]byte, wire.IPv4MinLen+wire.UDPLen)
	wire.IPv4(h).Encode(&wire.IPv4Fields{TotalLen: uint16(len(h) + n + wire.ICRCLen), ID: id, Flags: flags,
		TTL: 64, Protocol: 17, Src: src.Addr(), Dst: dst.Addr()})
	wire.UDP(h[wire.IPv4MinLen:]).Encode(src.Port(), dst.Port(), uint16(wire.UDPLen+n+wire.ICRCLen), 0)
	return h
}

func TestIDCacheNoAlloc(t *testing.T) {
	var c idCache
	lens := []int{44, 1052, 4124, 100, 44, 4124}
	i := 0
	if a := testing.AllocsPerRun(100, func() {
		c.table(lens[i%len(lens)]).AnyID(0x12345678)
		i++
	}); a != 0 {
		t.Errorf("%v allocations per lookup", a)
	}
}

// BenchmarkCheckICRC: the receive-side check of a 1 KiB packet from a udp
// link (IPv4 ID 0), from a GSO run (ID 37, received alone), and from a
// peer that numbers its datagrams (rxe: ID 4242, unverified), and one
// that no ID explains (bad).
func BenchmarkCheckICRC(b *testing.B) {
	src, dst := netip.MustParseAddrPort("192.0.2.1:50000"), netip.MustParseAddrPort("192.0.2.2:4791")
	l := &Link{local: dst, is4: true}
	pkt := make([]byte, 1024+28)
	for i := range pkt {
		pkt[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name string
		id   uint16
		flip uint32
	}{{"id0", 0, 0}, {"gso", 37, 0}, {"rxe", 4242, 0}, {"bad", 0, 0x5a5a5a5a}} {
		b.Run(c.name, func(b *testing.B) {
			var s rxScratch
			icrc := wire.ComputeICRC(&wire.PseudoHeader{Src: src, Dst: dst, IPID: c.id}, pkt) ^ c.flip
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				l.checkICRC(&s, src, pkt, icrc, 0)
			}
		})
	}
}
