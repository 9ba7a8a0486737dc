// Package rocepeer sets up the soft-RoCE side of rsockbench's verbs-level
// modes (verbs, and the stand-ins for rdma-core's tools: rc-pingpong and
// perftest's): the local address that reaches a peer, and a device on it.
package rocepeer

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// LocalIPFor returns the local IP the kernel would use to reach peer.
func LocalIPFor(peer netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, verbs.RoCEv2Port)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// For returns addr if it is valid, else the local IP that routes to peer
// with port 4791.
func For(addr netip.AddrPort, peer netip.Addr) (netip.AddrPort, error) {
	if addr.IsValid() {
		return addr, nil
	}
	ip, err := LocalIPFor(peer)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ip, verbs.RoCEv2Port), nil
}

// ForConn returns addr if it is valid, else the local IP that routes to
// the far end of conn, a TCP connection to the peer, with port 4791.
func ForConn(addr netip.AddrPort, conn net.Conn) (netip.AddrPort, error) {
	if addr.IsValid() {
		return addr, nil
	}
	ta, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no RoCE address given and the connection (%v) is not TCP", conn.RemoteAddr())
	}
	return For(addr, ta.AddrPort().Addr().Unmap())
}

// OpenDevice opens a soft-RoCE device on addr, on the link that netconn's
// plan gives for a RoCE peer and the setting $RSOCK_LINK
// (netconn.RoCELink): a UDP socket bound to addr for auto and udp, or the
// registered link the setting names (dpdk), whose address must then be
// addr's IP. A link that cannot reach a RoCE peer (memif) or an unknown
// name is an error.
func OpenDevice(addr netip.AddrPort) (*softroce.Device, error) {
	name, err := netconn.RoCELink("", addr.Addr(), addr.Addr())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", netconn.EnvLink, err)
	}
	l, err := openLink(name, addr)
	if err != nil {
		return nil, err
	}
	cfg := softroce.Config{Link: l}
	if m, ok := l.(interface{ MTU() int }); ok && l.Name() != netconn.LinkUDP {
		mtu, err := softroce.MTUForIP(m.MTU(), !l.LocalAddr().Addr().Is4())
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("%s link: %w", l.Name(), err)
		}
		cfg.MaxMTU = mtu
	}
	dev, err := softroce.Open(cfg)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("soft-RoCE device: %w", err)
	}
	return dev, nil
}

// openLink opens the link name at addr.
func openLink(name string, addr netip.AddrPort) (link.Link, error) {
	if name == netconn.LinkUDP {
		l, err := udp.Listen(udp.Config{Addr: addr})
		if err != nil {
			return nil, fmt.Errorf("RoCE link on %v: %w", addr, err)
		}
		return l, nil
	}
	open, ok := link.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("link %q is not in this binary", name)
	}
	l, err := open(link.OpenConfig{Addr: addr.Addr()})
	if err != nil {
		return nil, fmt.Errorf("%s link: %w", name, err)
	}
	if got := l.LocalAddr(); got.Addr() != addr.Addr().Unmap() || got.Port() != addr.Port() {
		l.Close()
		return nil, fmt.Errorf("%s link is at %v, not at %v (the RoCE address)", name, got, addr)
	}
	return l, nil
}
