//go:build linux

// This file asks the kernel for the MTU of the route to a peer.

package udp

import (
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"golang.org/x/sys/unix"
)

// RouteMTU returns the IP MTU of the route from local to remote as the
// kernel knows it: the outgoing interface's MTU, a route's mtu attribute,
// or a smaller path MTU learned from ICMP. It connects a UDP socket (no
// packet is sent) and reads IP_MTU or IPV6_MTU.
func RouteMTU(local, remote netip.Addr) (int, error) {
	local, remote = local.Unmap(), remote.Unmap()
	if !remote.IsValid() || (local.IsValid() && local.Is4() != remote.Is4()) {
		return 0, fmt.Errorf("udp: route MTU from %v to %v: address families differ", local, remote)
	}
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU
	if remote.Is4() {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("udp: route MTU: %w", err)
	}
	defer unix.Close(fd)
	if local.IsValid() && !local.IsUnspecified() {
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(local, 0))); err != nil {
			return 0, fmt.Errorf("udp: route MTU from %v: %w", local, err)
		}
	}
	if err := unix.Connect(fd, sockaddr(netip.AddrPortFrom(remote, link.RoCEv2Port))); err != nil {
		return 0, fmt.Errorf("udp: route MTU to %v: %w", remote, err)
	}
	mtu, err := unix.GetsockoptInt(fd, level, opt)
	if err != nil {
		return 0, fmt.Errorf("udp: route MTU to %v: %w", remote, err)
	}
	return mtu, nil
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if z := ap.Addr().Zone(); z != "" {
		if ifi, err := netInterfaceByName(z); err == nil {
			sa.ZoneId = uint32(ifi)
		}
	}
	return sa
}
