//go:build linux

// This file asks the kernel for the MTU of the route to a peer, as
// configured and as learned from ICMP.

package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"golang.org/x/sys/unix"
)

// RouteMTU returns the IP MTU of the route from local to remote as it is
// configured: the route's mtu attribute, or else the MTU of its outgoing
// interface (the smallest, for a multipath route). It asks the kernel's
// routing table itself (rtnetlink RTM_GETROUTE with RTM_F_FIB_MATCH, as
// `ip route get fibmatch` does), so a path MTU learned from ICMP is left
// out: anyone can forge an ICMP "fragmentation needed" or "packet too
// big", and the kernel would keep the lower MTU for ten minutes.
func RouteMTU(local, remote netip.Addr) (int, error) {
	local, remote = local.Unmap(), remote.Unmap()
	if !remote.IsValid() || (local.IsValid() && local.Is4() != remote.Is4()) {
		return 0, fmt.Errorf("udp: route MTU from %v to %v: address families differ", local, remote)
	}
	r, err := fibLookup(local, remote)
	if err != nil {
		return 0, fmt.Errorf("udp: route MTU from %v to %v: %w", local, remote, err)
	}
	mtu := r.mtu
	for _, oif := range r.oifs[:r.n] {
		ifi, err := net.InterfaceByIndex(oif)
		if err != nil {
			return 0, fmt.Errorf("udp: route MTU from %v to %v: interface %d: %w", local, remote, oif, err)
		}
		if mtu == 0 || ifi.MTU < mtu {
			mtu = ifi.MTU
		}
	}
	return mtu, nil
}

// fibLookup asks the kernel for the route from local (if valid) to remote.
func fibLookup(local, remote netip.Addr) (fibRoute, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fibRoute{}, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fibRoute{}, err
	}
	family, bits := unix.AF_INET6, 128
	if remote.Is4() {
		family, bits = unix.AF_INET, 32
	}
	const seq = 1
	var req [nlmsgHdrLen + rtmsgLen + 2*(rtaHdrLen+16) + rtaHdrLen + 4]byte
	b := req[:nlmsgHdrLen+rtmsgLen]
	ne := binary.NativeEndian
	ne.PutUint16(b[4:], unix.RTM_GETROUTE)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], seq)
	rtm := b[nlmsgHdrLen:]
	rtm[0] = byte(family)
	rtm[1] = byte(bits) // rtm_dst_len
	ne.PutUint32(rtm[8:], unix.RTM_F_FIB_MATCH)
	b = appendAttr(b, unix.RTA_DST, remote.AsSlice())
	if local.IsValid() && !local.IsUnspecified() {
		rtm[2] = byte(bits) // rtm_src_len
		b = appendAttr(b, unix.RTA_SRC, local.AsSlice())
	}
	if z := remote.Zone(); z != "" {
		if i, err := netInterfaceByName(z); err == nil {
			b = appendAttr(b, unix.RTA_OIF, ne.AppendUint32(nil, uint32(i)))
		}
	}
	ne.PutUint32(b[0:], uint32(len(b)))
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fibRoute{}, err
	}
	buf := make([]byte, 16<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fibRoute{}, err
		}
		r, err := parseFIBReply(buf[:n], seq)
		if err == errNoRoute && n > 0 {
			continue // messages of other requests only
		}
		return r, err
	}
}

// appendAttr appends a route attribute to b.
func appendAttr(b []byte, typ uint16, val []byte) []byte {
	ne := binary.NativeEndian
	b = ne.AppendUint16(b, uint16(rtaHdrLen+len(val)))
	b = ne.AppendUint16(b, typ)
	b = append(b, val...)
	for len(b)%nlmsgAlignTo != 0 {
		b = append(b, 0)
	}
	return b
}

// LearnedPathMTU returns the IP MTU toward remote as the kernel knows it,
// a path MTU learned from ICMP included (IP_MTU or IPV6_MTU of a connected
// UDP socket; no packet is sent). That ICMP may be forged: use it to
// explain a failure, never as a reason to act.
func LearnedPathMTU(local, remote netip.Addr) (int, error) {
	local, remote = local.Unmap(), remote.Unmap()
	if !remote.IsValid() || (local.IsValid() && local.Is4() != remote.Is4()) {
		return 0, fmt.Errorf("udp: path MTU from %v to %v: address families differ", local, remote)
	}
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU
	if remote.Is4() {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("udp: path MTU: %w", err)
	}
	defer unix.Close(fd)
	if local.IsValid() && !local.IsUnspecified() {
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(local, 0))); err != nil {
			return 0, fmt.Errorf("udp: path MTU from %v: %w", local, err)
		}
	}
	if err := unix.Connect(fd, sockaddr(netip.AddrPortFrom(remote, link.RoCEv2Port))); err != nil {
		return 0, fmt.Errorf("udp: path MTU to %v: %w", remote, err)
	}
	mtu, err := unix.GetsockoptInt(fd, level, opt)
	if err != nil {
		return 0, fmt.Errorf("udp: path MTU to %v: %w", remote, err)
	}
	return mtu, nil
}

// PathMTUHint returns the IP MTU toward dst as the kernel learned it,
// from ICMP perhaps (LearnedPathMTU): a hint for the error of a queue
// pair whose packets stopped getting through.
func (l *Link) PathMTUHint(dst netip.Addr) (int, bool) {
	mtu, err := LearnedPathMTU(l.local.Addr(), dst)
	return mtu, err == nil
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
