//go:build linux

package udp

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// TestECN sends runs of packets with each ECN codepoint (runs of one
// codepoint, single packets, a codepoint changing inside what would be a
// GSO run) over loopback, IPv4 and IPv6, with every combination of GSO
// and GRO, and checks that each packet arrives with its codepoint and its
// bytes and ICRC intact: Send puts the codepoint on each message (a GSO
// run never mixes two), Recv reads it from IP_TOS or IPV6_TCLASS for each
// datagram or coalesced message.
func TestECN(t *testing.T) {
	loop6 := netip.MustParseAddrPort("[::1]:0")
	codepoints := []link.ECN{link.ECNNotECT, link.ECNECT0, link.ECNECT1, link.ECNCE}
	for _, addr := range []netip.AddrPort{loop4, loop6} {
		if addr.Addr().Is6() {
			l, err := Listen(Config{Addr: addr})
			if err != nil {
				t.Skipf("%v unavailable: %v", addr.Addr(), err)
			}
			l.Close()
		}
		for _, c := range offloadCombos {
			t.Run(fmt.Sprintf("%v/%s", addr.Addr(), c.name), func(t *testing.T) {
				a := listenOffloads(t, addr, c.gso, false)
				b := listenOffloads(t, addr, false, c.gro)
				r := rand.New(rand.NewPCG(7, 8))
				tx := bufs(96, 1028)
				for i := range tx {
					fill(&tx[i], 1024, b.LocalAddr(), r)
					switch {
					case i < 64:
						tx[i].ECN = codepoints[i/16] // runs of 16
					default:
						tx[i].ECN = codepoints[r.IntN(4)] // changing often
					}
				}
				if err := a.Send(tx); err != nil {
					t.Fatal(err)
				}
				checkSentICRCs(t, a.LocalAddr(), tx, expectedIDs(tx, c.gso))
				got := recvN(t, b, len(tx), 1028)
				checkReceived(t, got, tx, a.LocalAddr())
				for i := range got {
					if got[i].ECN != tx[i].ECN {
						t.Fatalf("packet %d arrived with ECN %d, sent with %d", i, got[i].ECN, tx[i].ECN)
					}
				}
			})
		}
	}
}
