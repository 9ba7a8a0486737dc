//go:build linux

package netpath

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/netlab"
)

// TestPathMTUDrop: A and B talk through a router (M) over 9000-byte links,
// so their connection takes a 4096-byte RoCE MTU. Mid-exchange the
// router's links drop to an MTU of 1500: it drops every full-sized packet
// and answers each with a real ICMP "fragmentation needed" or "packet too
// big". The udp link does not act on ICMP (a forged one must reset
// nothing, see test/hostile TestForgedICMP) and a queue pair does not
// re-segment packets in flight, so the outcome designed is a clear error
// in bounded time: once a queue pair's retries run out (about a minute
// with the defaults) its process ends the exchange with an error that
// wraps ECONNRESET and names the path MTU of 1500 bytes; it closes its
// control connection, and the other process, whose retries have not run
// out yet, ends with ECONNRESET at once ("the peer's control connection
// closed"), or names the path MTU itself. No hang, never a wrong byte.
func TestPathMTUDrop(t *testing.T) {
	skipUnlessLab(t)
	bin, _ := build(t)
	for _, ipv6 := range []bool{false, true} {
		t.Run(family(ipv6), func(t *testing.T) {
			t.Parallel()
			lab := newLab(t, netlab.Config{MTU: 9000, Router: true})
			const (
				n         = 64 << 20
				rate      = 8 << 20
				threshold = 2 << 20
			)
			lp, dp, ev := startUntil(t, lab, bin, netlab.ExchangeOptions{Bytes: n, Rate: rate, ProgressEvery: 1 << 20,
				Seed: 600, IPv6: ipv6, Stall: 3 * time.Minute}, threshold)
			if err := lab.SetRouterMTU(1500); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			named := 0
			t.Logf("router MTU 1500 from %d bytes received by A", ev.Received)
			for i, p := range []*netlab.Proc{lp, dp} {
				side := []string{"listener (B)", "dialer (A)"}[i]
				ev, err := netlab.WaitEvent(p, 3*time.Minute, netlab.IsEvent(netlab.EventResult))
				if err != nil {
					t.Fatalf("%s: %v", side, err)
				}
				r := ev.Result
				t.Logf("%s: after %.1fs: %s (sent %d, received %d)", side, time.Since(start).Seconds(), r.Error, r.Sent, r.Received)
				if !strings.HasPrefix(r.Transport, "rdma/") {
					t.Errorf("%s ran on %q, not RDMA", side, r.Transport)
				}
				if r.Error == "" || r.Received >= n {
					t.Errorf("%s completed (received %d) with 4 KiB packets over a 1500-byte path", side, r.Received)
				} else {
					if !strings.Contains(r.Error, syscall.ECONNRESET.Error()) {
						t.Errorf("%s: error %q does not wrap ECONNRESET", side, r.Error)
					}
					if strings.Contains(r.Error, "path MTU") && strings.Contains(r.Error, "1500 bytes") {
						named++
					} else if !strings.Contains(r.Error, "peer's control connection closed") {
						t.Errorf("%s: error %q names neither the path MTU of 1500 bytes nor the peer's closing", side, r.Error)
					}
				}
				if r.MismatchAt >= 0 {
					t.Errorf("%s: received stream differs from the peer's pattern at offset %d", side, r.MismatchAt)
				}
			}
			for _, ns := range []*netlab.Namespace{lab.A, lab.B} {
				peer := lab.B.Addr(ipv6)
				if ns == lab.B {
					peer = lab.A.Addr(ipv6)
				}
				out, _ := ns.Run("ip", "route", "get", peer.String())
				t.Logf("%s: ip route get %v: %s", ns.Name, peer, strings.Join(strings.Fields(out), " "))
			}
			if named == 0 {
				t.Error("no side's error names the path MTU of 1500 bytes")
			}
			if d := time.Since(start); d > 2*time.Minute {
				t.Errorf("the exchange took %v to fail, beyond the retries' bound", d)
			}
		})
	}
}
