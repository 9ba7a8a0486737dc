package wire

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestICRCIDTable checks the ICRC differences by IPv4 ID against
// ComputeICRC: one by one below ICRCIDSpan (Delta, ID), and through the
// basis for any ID (AnyID); a random difference is rarely any ID's.
func TestICRCIDTable(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	src := netip.MustParseAddrPort("192.0.2.1:49152")
	dst := netip.MustParseAddrPort("192.0.2.2:4791")
	var tab ICRCIDTable
	misses := 0
	for _, n := range []int{12, 13, 100, 1000, 4096 + 28, 9000, 65000} {
		pkt := make([]byte, n)
		for i := range pkt {
			pkt[i] = byte(r.Uint32())
		}
		tab.Fill(n)
		if tab.Len() != n {
			t.Fatalf("Len %d, want %d", tab.Len(), n)
		}
		ph := PseudoHeader{Src: src, Dst: dst}
		c0 := ComputeICRC(&ph, pkt)
		for id := range ICRCIDSpan {
			ph.IPID = uint16(id)
			want := ComputeICRC(&ph, pkt) ^ c0
			if got := tab.Delta(id); got != want {
				t.Fatalf("n %d id %d: delta %08x, want %08x", n, id, got, want)
			}
			if got, ok := tab.ID(want); !ok || int(got) != id {
				t.Fatalf("n %d id %d: ID gives %d, %v", n, id, got, ok)
			}
		}
		for range 200 {
			ph.IPID = uint16(r.Uint32())
			if diff := ComputeICRC(&ph, pkt) ^ c0; !tab.AnyID(diff) {
				t.Fatalf("n %d id %d: AnyID false", n, ph.IPID)
			}
			if tab.AnyID(r.Uint32()) {
				misses++
			}
		}
	}
	if misses > 2 { // about 1 in 32,768 random differences is some ID's
		t.Fatalf("AnyID true for %d random differences", misses)
	}
}
