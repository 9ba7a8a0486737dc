package rocepeer

import (
	"net"
	"net/netip"
	"testing"
)

func TestFor(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	got, err := For(netip.AddrPort{}, lo)
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.AddrPortFrom(lo, Port); got != want {
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
