//go:build rdmacore

package rdmacore

import (
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/verbs"
)

// gidEntry is one entry of a port's GID table.
type gidEntry struct {
	index  int
	gid    verbs.GID
	rocev2 bool
}

// chooseGID returns the position in table of the RoCEv2 GID for ip. With
// an invalid ip it takes the first RoCEv2 GID of an IPv4 address, else
// the first RoCEv2 GID that is not link-local. It fails when there is
// none, saying what the table holds.
func chooseGID(table []gidEntry, ip netip.Addr) (int, error) {
	if ip.IsValid() {
		want := verbs.GIDFromAddr(ip.Unmap())
		for i, e := range table {
			if e.rocev2 && e.gid == want {
				return i, nil
			}
		}
		return -1, fmt.Errorf("no RoCEv2 GID for %v among %d GIDs: %w", ip, len(table), verbs.ErrNoDevice)
	}
	fallback := -1
	for i, e := range table {
		if !e.rocev2 {
			continue
		}
		a := e.gid.Addr()
		if a.Is4() {
			return i, nil
		}
		if fallback < 0 && !a.IsLinkLocalUnicast() {
			fallback = i
		}
	}
	if fallback < 0 {
		return -1, fmt.Errorf("no routable RoCEv2 GID among %d GIDs: %w", len(table), verbs.ErrNoDevice)
	}
	return fallback, nil
}

// gidView orders a port's RoCEv2 GIDs for verbs.PortAttr: the chosen one
// first, as rsock announces GIDs[0]. AH.SGIDIndex counts in this order,
// and index maps it back to the device's table.
type gidView struct {
	gids  []verbs.GID
	index []int // device GID index of gids[i]
}

func newGIDView(table []gidEntry, chosen int) gidView {
	v := gidView{gids: []verbs.GID{table[chosen].gid}, index: []int{table[chosen].index}}
	for i, e := range table {
		if i != chosen && e.rocev2 {
			v.gids = append(v.gids, e.gid)
			v.index = append(v.index, e.index)
		}
	}
	return v
}

// deviceIndex maps a view index to the device's GID index.
func (v gidView) deviceIndex(i uint8) (uint8, error) {
	if int(i) >= len(v.index) {
		return 0, fmt.Errorf("rdmacore: SGID index %d of %d RoCEv2 GIDs: %w", i, len(v.index), verbs.ErrInvalidArgument)
	}
	return uint8(v.index[i]), nil
}

// viewIndex maps a device GID index back to the view.
func (v gidView) viewIndex(dev uint8) uint8 {
	for i, d := range v.index {
		if d == int(dev) {
			return uint8(i)
		}
	}
	return 0
}
