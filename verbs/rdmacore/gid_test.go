//go:build rdmacore

package rdmacore

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

func gidOf(s string) verbs.GID { return verbs.GIDFromAddr(netip.MustParseAddr(s)) }

// rxeTable is rxe0's table as the guest shows it: the link-local GID and
// the IPv4 one, each as RoCEv1 and RoCEv2 (rxe lists v2 at odd indexes).
var rxeTable = []gidEntry{
	{0, gidOf("fe80::5054:ff:fe12:3456"), false},
	{1, gidOf("fe80::5054:ff:fe12:3456"), true},
	{2, gidOf("10.99.0.11"), false},
	{3, gidOf("10.99.0.11"), true},
	{4, gidOf("2001:db8::11"), true},
}

func TestChooseGID(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want int // position in rxeTable, -1 for none
	}{
		{"10.99.0.11", 3},
		{"::ffff:10.99.0.11", 3},
		{"2001:db8::11", 4},
		{"10.99.0.12", -1},
		{"", 3}, // any: the IPv4 RoCEv2 GID
	} {
		var ip netip.Addr
		if tc.ip != "" {
			ip = netip.MustParseAddr(tc.ip)
		}
		got, err := chooseGID(rxeTable, ip)
		if got != tc.want {
			t.Errorf("chooseGID(%q) = %d, %v; want %d", tc.ip, got, err, tc.want)
		}
		if tc.want < 0 && !errors.Is(err, verbs.ErrNoDevice) {
			t.Errorf("chooseGID(%q) error %v, want ErrNoDevice", tc.ip, err)
		}
	}
	// Only RoCEv1 GIDs, or only link-local ones: nothing to use.
	if i, err := chooseGID(rxeTable[:1], netip.Addr{}); err == nil {
		t.Errorf("a RoCEv1-only table gave %d", i)
	}
	if i, err := chooseGID(rxeTable[:2], netip.Addr{}); err == nil {
		t.Errorf("a link-local-only table gave %d", i)
	}
	// No IPv4 GID: the routable IPv6 one.
	if i, err := chooseGID([]gidEntry{rxeTable[1], rxeTable[4]}, netip.Addr{}); i != 1 || err != nil {
		t.Errorf("IPv6 table gave %d, %v", i, err)
	}
}

func TestGIDView(t *testing.T) {
	v := newGIDView(rxeTable, 3)
	want := []verbs.GID{rxeTable[3].gid, rxeTable[1].gid, rxeTable[4].gid}
	if len(v.gids) != len(want) {
		t.Fatalf("view %v, want %v", v.gids, want)
	}
	for i := range want {
		if v.gids[i] != want[i] {
			t.Fatalf("view %v, want %v", v.gids, want)
		}
	}
	for view, dev := range []uint8{3, 1, 4} {
		got, err := v.deviceIndex(uint8(view))
		if err != nil || got != dev {
			t.Errorf("deviceIndex(%d) = %d, %v; want %d", view, got, err, dev)
		}
		if back := v.viewIndex(dev); back != uint8(view) {
			t.Errorf("viewIndex(%d) = %d, want %d", dev, back, view)
		}
	}
	if _, err := v.deviceIndex(3); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("deviceIndex past the view: %v, want ErrInvalidArgument", err)
	}
}
