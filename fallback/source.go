package fallback

import (
	"net"
	"net/netip"
)

// SourceOf returns the source of a connection for per-source bounds: the
// remote IPv4 address, or the /64 holding a remote IPv6 address (what one
// host or site usually has to itself). ok is false for a remote address
// that is not an IP address (a Unix socket, a pipe), which has no bound.
func SourceOf(remote net.Addr) (src netip.Prefix, ok bool) {
	var ip netip.Addr
	switch a := remote.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	switch {
	case ip.Is4():
		return netip.PrefixFrom(ip, 32), true
	case ip.Is6():
		p, err := ip.WithZone("").Prefix(64)
		return p, err == nil
	}
	return netip.Prefix{}, false
}
