// Package rocepeer sets up the soft-RoCE side of rsockbench's verbs-level
// modes (verbs, and the stand-ins for rdma-core's tools: rc-pingpong and
// perftest's): the local address that reaches a peer, and a device on it.
package rocepeer

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// Port is the UDP port RoCEv2 peers (rxe, RNICs) send to.
const Port = 4791

// LocalIPFor returns the local IP the kernel would use to reach peer.
func LocalIPFor(peer netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, Port)))
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
	return netip.AddrPortFrom(ip, Port), nil
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

// OpenDevice opens a soft-RoCE device on a UDP link bound to addr.
func OpenDevice(addr netip.AddrPort) (*softroce.Device, error) {
	l, err := udp.Listen(udp.Config{Addr: addr})
	if err != nil {
		return nil, fmt.Errorf("RoCE link on %v: %w", addr, err)
	}
	dev, err := softroce.Open(softroce.Config{Link: l})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("soft-RoCE device: %w", err)
	}
	return dev, nil
}
