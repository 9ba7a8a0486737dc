package fallback

import (
	"net"
	"net/netip"
	"testing"
)

func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string // "" for no source
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7/32"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7/32"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 1, Zone: "eth0"}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}, "::/64"},
		{&net.TCPAddr{}, ""},
		{&net.UnixAddr{Name: "@x", Net: "unix"}, ""},
	} {
		got, ok := SourceOf(tc.addr)
		if tc.want == "" {
			if ok {
				t.Errorf("%v: source %v, want none", tc.addr, got)
			}
			continue
		}
		if !ok || got != netip.MustParsePrefix(tc.want) {
			t.Errorf("%v: source %v (%v), want %s", tc.addr, got, ok, tc.want)
		}
	}
}
