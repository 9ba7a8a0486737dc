// This file finds the MTU of the interface that holds an address.

package udp

import (
	"fmt"
	"net"
	"net/netip"
)

// InterfaceMTU returns the MTU of the interface that holds ip, as rxe
// takes a device's MTU from its netdev.
func InterfaceMTU(ip netip.Addr) (int, error) {
	ip = ip.Unmap()
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, fmt.Errorf("udp: interface MTU of %v: %w", ip, err)
	}
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(p.IP); ok && x.Unmap() == ip.WithZone("") {
					return ifi.MTU, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("udp: no interface holds %v", ip)
}

func netInterfaceByName(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}
