package rocepeer

import (
	"net"
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

func TestFor(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	got, err := For(netip.AddrPort{}, lo)
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.AddrPortFrom(lo, verbs.RoCEv2Port); got != want {
		t.Fatalf("For(invalid, 127.0.0.1) = %v, want %v", got, want)
	}
	given := netip.MustParseAddrPort("127.0.0.1:5000")
	if got, err := For(given, lo); err != nil || got != given {
		t.Fatalf("For(%v) = %v, %v; want it unchanged", given, got, err)
	}
}

func TestForConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := ForConn(netip.AddrPort{}, a); err == nil {
		t.Error("ForConn derived an address from a connection that is not TCP")
	}
	given := netip.MustParseAddrPort("127.0.0.1:5000")
	if got, err := ForConn(given, a); err != nil || got != given {
		t.Errorf("ForConn(%v) = %v, %v; want it unchanged", given, got, err)
	}
}

// TestOpenDeviceRegistered opens the device on the link $RSOCK_LINK
// names when one is registered under that name, and refuses one whose
// address is not the RoCE address; auto and udp open a UDP socket, and
// a link that cannot reach a RoCE peer, or no link at all, is an error.
func TestOpenDeviceRegistered(t *testing.T) {
	pn := pipe.NewNetwork(pipe.Faults{})
	defer pn.Close()
	at := netip.MustParseAddrPort("192.0.2.7:4791")
	opened := 0
	link.Register("rocepeer-test", func(link.OpenConfig) (link.Link, error) {
		opened++
		return pn.Endpoint(at)
	})
	t.Setenv(netconn.EnvLink, "rocepeer-test")
	dev, err := OpenDevice(at)
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Link(); got != "pipe" || opened != 1 {
		t.Errorf("device on link %q after %d opens; want the registered pipe link, opened once", got, opened)
	}
	dev.Close()
	if dev, err := OpenDevice(netip.MustParseAddrPort("192.0.2.8:4791")); err == nil {
		dev.Close()
		t.Error("OpenDevice accepted a registered link at another address")
	}
	for _, name := range []string{"", netconn.LinkAuto, netconn.LinkUDP} {
		t.Setenv(netconn.EnvLink, name)
		dev, err := OpenDevice(netip.MustParseAddrPort("127.0.0.1:0"))
		if err != nil {
			t.Errorf("RSOCK_LINK=%q: %v; want the UDP link", name, err)
			continue
		}
		if got := dev.Link(); got != "udp" {
			t.Errorf("RSOCK_LINK=%q: device on %q, want udp", name, got)
		}
		dev.Close()
	}
	for _, name := range []string{netconn.LinkMemif, "no-such-link"} {
		t.Setenv(netconn.EnvLink, name)
		if dev, err := OpenDevice(netip.MustParseAddrPort("127.0.0.1:0")); err == nil {
			dev.Close()
			t.Errorf("RSOCK_LINK=%q: a device on %q, want an error", name, dev.Link())
		}
	}
}
