//go:build dpdk

package dpdk

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// TestForgedARPOverRing: two links over net_ring resolve each other, then
// the port of b sends forged ARP into the wire as an attacker on the
// segment would: replies nobody asked for that move b's address to
// another MAC, a gratuitous ARP doing the same, a reply for an address a
// never asked about, and a flood of requests. a must keep b's MAC (its
// packets still reach b), make no entry for the other address, and
// answer the flood with a bounded number of replies.
func TestForgedARPOverRing(t *testing.T) {
	a, b := ringLinks(t)
	rxB := receive(t, b)
	receive(t, a)
	send := func(n int) {
		t.Helper()
		var out []link.Packet
		for i := range n {
			out = append(out, link.Packet{Buf: mkPkt(100, byte(i)), N: 100, Addr: b.LocalAddr()})
		}
		if err := a.Send(out); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			select {
			case <-rxB:
			case <-time.After(10 * time.Second):
				t.Fatalf("b received %d of %d; stats %+v %+v", i, n, a.Stats(), b.Stats())
			}
		}
	}
	send(5) // a resolves b
	attacker := station{mac: wire.MAC{2, 0, 0, 0, 0, 0x66}, ip: b.st.ip}
	stranger := station{mac: wire.MAC{2, 0, 0, 0, 0, 0x67}, ip: netip.MustParseAddr("192.0.2.77")}
	var f ctlFrame
	forge := func(st station, op uint16, targetMAC wire.MAC, targetIP netip.Addr) {
		f.n = st.arpFrame(f.b[:], op, targetMAC, targetIP)
		b.sendFrame(&f)
	}
	before := a.Stats()
	for range 5 {
		forge(attacker, wire.ARPReply, a.st.mac, a.st.ip)         // an unsolicited reply
		forge(attacker, wire.ARPRequest, wire.MAC{}, attacker.ip) // gratuitous ARP
		forge(attacker, wire.ARPRequest, wire.MAC{}, a.st.ip)     // a request claiming b's address
		forge(stranger, wire.ARPReply, a.st.mac, a.st.ip)         // an answer to nothing
		forge(stranger, wire.ARPRequest, wire.MAC{}, stranger.ip) // gratuitous, unknown address
	}
	const flood = 2000
	for range flood {
		forge(stranger, wire.ARPRequest, wire.MAC{}, a.st.ip)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().ARPIn-before.ARPIn < 25+flood && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(deadline.Add(-10 * time.Second))
	after := a.Stats()
	t.Logf("a took %d ARP frames and sent %d in %v", after.ARPIn-before.ARPIn, after.ARPOut-before.ARPOut, elapsed)
	a.neighMu.Lock()
	mac, st := a.neigh.lookup(b.st.ip, time.Now())
	_, stStranger := a.neigh.lookup(stranger.ip, time.Now())
	a.neighMu.Unlock()
	if st == neighNone || mac != b.st.mac {
		t.Errorf("b's entry is %v %v after the forged ARP, want %v", mac, st, b.st.mac)
	}
	if stStranger != neighNone {
		t.Errorf("an entry was made for %v", stranger.ip)
	}
	// Each reply a sends is a frame on the wire: bounded by the burst and
	// the rate over the time the flood took (and a's own requests).
	if max := uint64(replyBurst + replyRate*(elapsed.Seconds()+1) + 10); after.ARPOut-before.ARPOut > max {
		t.Errorf("a sent %d ARP frames for a flood of %d requests, want at most %d", after.ARPOut-before.ARPOut, flood, max)
	}
	send(5) // a's packets still reach b
}
