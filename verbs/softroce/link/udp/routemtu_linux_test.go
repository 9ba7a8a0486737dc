//go:build linux

package udp

import (
	"net/netip"
	"testing"
)

// TestRouteMTULoopback: the route to another loopback address goes out of
// lo, and RouteMTU says lo's MTU, as IP_MTU does while no ICMP lowered it.
func TestRouteMTULoopback(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	want, err := InterfaceMTU(lo)
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct{ local, remote string }{{"127.0.0.1", "127.0.0.1"}, {"", "127.0.0.1"}, {"::1", "::1"}} {
		var l netip.Addr
		if c.local != "" {
			l = netip.MustParseAddr(c.local)
		}
		got, err := RouteMTU(l, netip.MustParseAddr(c.remote))
		if err != nil {
			t.Fatalf("%s to %s: %v", c.local, c.remote, err)
		}
		if got != want {
			t.Errorf("%s to %s: route MTU %d, lo's MTU is %d", c.local, c.remote, got, want)
		}
	}
	if _, err := RouteMTU(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")); err == nil {
		t.Error("mixed families accepted")
	}
}
