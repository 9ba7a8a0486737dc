//go:build linux

// Socket setup and teardown of the Linux link: type Link, Listen, the socket
// options, Close, accessors and sockaddr helpers.

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

const (
	// maxSegs is the largest number of packets Send puts into one GSO
	// message (the kernel's UDP_MAX_SEGMENTS was 64 before Linux 6.9),
	// and so the range of IPv4 IDs, 0 to maxSegs-1, that Recv tries.
	maxSegs = 1 << idBits
	idBits  = 6
	// maxGSOBytes bounds the UDP payload of one GSO message: the IPv4
	// total length field (65535) less the IPv4 (20) and UDP (8) headers.
	maxGSOBytes = 65535 - 20 - 8
	// groSlot is the size of each receive scratch buffer of a GRO link,
	// enough for the largest coalesced message.
	groSlot = 1 << 16
	// maxGROSlots bounds the number of coalesced messages one recvmmsg
	// call of a GRO link asks for, and so its scratch memory (4 MiB).
	maxGROSlots = 64
)

// Control message sizes: UDP_SEGMENT carries a uint16, UDP_GRO an int,
// IP_TOS an int on send and a byte on receive, IPV6_TCLASS an int. A send
// message carries up to UDP_SEGMENT and a TOS; a received one up to
// UDP_GRO and a TOS (with room to spare).
var (
	txCtlLen      = unix.CmsgLen(2)
	txCtlSegSpace = unix.CmsgSpace(2)
	txCtlTOSLen   = unix.CmsgLen(4)
	txCtlTOSSpace = unix.CmsgSpace(4)
	txCtlSpace    = txCtlSegSpace + txCtlTOSSpace
	// sizeofTimespec is the size of a unix.Timespec (SCM_TIMESTAMPNS).
	sizeofTimespec = int(unsafe.Sizeof(unix.Timespec{}))
	rxCtlSpace     = 3*unix.CmsgSpace(4) + unix.CmsgSpace(sizeofTimespec)
)

// Link is a link.Link over a kernel UDP socket. Create it with Listen.
type Link struct {
	conn   *net.UDPConn
	rc     syscall.RawConn
	local  netip.AddrPort
	is4    bool
	strict bool
	batch  int

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	sendMu sync.Mutex // guards tx and serialises Send calls
	tx     txScratch
	gso    atomic.Bool           // send with UDP_SEGMENT; turned off only under sendMu
	sendF  func(fd uintptr) bool // l.sendmmsg, bound once

	recvMu sync.Mutex // guards rx and serialises Recv calls
	rx     rxScratch
	gro    bool                  // UDP_GRO is enabled on the socket; fixed at Listen
	recvF  func(fd uintptr) bool // l.recvmmsg, bound once
	drops  atomic.Uint64         // datagrams dropped before they became packets
}

var _ link.DropCounter = (*Link)(nil)

// Dropped returns how many datagrams Recv dropped as malformed: shorter
// than a BTH and an ICRC, truncated, or from a foreign address family.
func (l *Link) Dropped() uint64 { return l.drops.Load() }

var _ link.Link = (*Link)(nil)

// Listen binds a UDP socket as described by cfg and returns a Link on it.
func Listen(cfg Config) (*Link, error) {
	ip := cfg.Addr.Addr().Unmap()
	if !ip.IsValid() {
		return nil, errors.New("udp: Config.Addr has no IP address")
	}
	if ip.IsUnspecified() {
		return nil, fmt.Errorf("udp: Config.Addr %v: the IP must be a specific address, since the ICRC covers it", ip)
	}
	if cfg.RecvBuffer < 0 || cfg.SendBuffer < 0 || cfg.Batch < 0 {
		return nil, errors.New("udp: negative Config.RecvBuffer, SendBuffer or Batch")
	}
	if cfg.RecvBuffer == 0 {
		cfg.RecvBuffer = DefaultRecvBuffer
	}
	if cfg.SendBuffer == 0 {
		cfg.SendBuffer = DefaultSendBuffer
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	cfg.Batch = min(cfg.Batch, MaxBatch)

	is4 := ip.Is4()
	network := "udp6"
	if is4 {
		network = "udp4"
	}
	var conn *net.UDPConn
	var err error
	if cfg.Addr.Port() != 0 {
		conn, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, cfg.Addr.Port())))
	} else {
		conn, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, link.RoCEv2Port)))
		if errors.Is(err, unix.EADDRINUSE) {
			conn, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	l, err := newLink(conn, ip, is4, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

func newLink(conn *net.UDPConn, ip netip.Addr, is4 bool, cfg Config) (*Link, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	var soErr error
	gso, gro := !cfg.DisableGSO, !cfg.DisableGRO
	err = rc.Control(func(fd uintptr) {
		soErr = setSockopts(int(fd), is4, cfg)
		if gso {
			// Reading UDP_SEGMENT fails with ENOPROTOOPT on kernels
			// without UDP GSO (before 4.18).
			_, e := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
			gso = e == nil
		}
		if gro {
			gro = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		}
	})
	if err == nil {
		err = soErr
	}
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	la, ok := conn.LocalAddr().(*net.UDPAddr)
	if !ok {
		return nil, fmt.Errorf("udp: unexpected local address %v", conn.LocalAddr())
	}
	l := &Link{
		conn:   conn,
		rc:     rc,
		local:  netip.AddrPortFrom(ip, uint16(la.Port)),
		is4:    is4,
		strict: cfg.StrictICRC,
		batch:  cfg.Batch,
		tx:     newTxScratch(cfg.Batch, is4),
		rx:     newRxScratch(cfg.Batch, is4, gro),
		gro:    gro,
	}
	l.gso.Store(gso)
	l.sendF = l.sendmmsg
	l.recvF = l.recvmmsg
	return l, nil
}

// setSockopts sets don't-fragment without the kernel's path MTU cache
// (IP_PMTUDISC_PROBE: DF set, so Linux sends IPv4 ID 0, and datagrams up
// to the interface's MTU are sent whatever ICMP said about the path; see
// the package comment) and the socket buffer sizes.
func setSockopts(fd int, is4 bool, cfg Config) error {
	if is4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE); err != nil {
			return fmt.Errorf("setsockopt IP_MTU_DISCOVER: %w", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE); err != nil {
			return fmt.Errorf("setsockopt IPV6_MTU_DISCOVER: %w", err)
		}
	}
	// Report each datagram's TOS (traffic class), for its ECN bits.
	if is4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return fmt.Errorf("setsockopt IP_RECVTOS: %w", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return fmt.Errorf("setsockopt IPV6_RECVTCLASS: %w", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fmt.Errorf("setsockopt SO_TIMESTAMPNS: %w", err)
	}
	if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, cfg.RecvBuffer); err != nil {
		return fmt.Errorf("setsockopt SO_RCVBUF: %w", err)
	}
	if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, cfg.SendBuffer); err != nil {
		return fmt.Errorf("setsockopt SO_SNDBUF: %w", err)
	}
	return nil
}

// setBuffer sets a socket buffer size with the privileged option force,
// falling back to the capped option plain.
func setBuffer(fd, force, plain, size int) error {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
}

// Name returns "udp".
func (l *Link) Name() string { return "udp" }

// LocalAddr returns the bound IP address and port.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// Offloads reports whether the link currently sends with UDP GSO and
// receives with UDP GRO. GSO can turn off by itself after Listen, when the
// kernel rejects a GSO message.
func (l *Link) Offloads() (gso, gro bool) { return l.gso.Load(), l.gro }

// BufferSizes reports the socket receive and send buffer sizes in bytes as
// the kernel holds them (Linux doubles the requested value for its
// bookkeeping overhead).
func (l *Link) BufferSizes() (recv, send int, err error) {
	var rerr, serr error
	err = l.rc.Control(func(fd uintptr) {
		recv, rerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		send, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	return recv, send, errors.Join(err, rerr, serr)
}

// Close closes the socket, unblocking Send and Recv. It is idempotent.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.closeErr = l.conn.Close()
	})
	return l.closeErr
}

// ioError maps an error from the socket to link.ErrClosed if the link is
// closed, and wraps it otherwise.
func (l *Link) ioError(op string, err error) error {
	if l.closed.Load() || errors.Is(err, net.ErrClosed) || errors.Is(err, unix.EBADF) {
		return link.ErrClosed
	}
	return fmt.Errorf("udp: %s: %w", op, err)
}

// putPort stores port in network byte order into a sockaddr port field.
func putPort(dst *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// getPort reads a sockaddr port field in network byte order.
func getPort(src *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(src))
	return uint16(b[0])<<8 | uint16(b[1])
}

func addrPort4(sa *unix.RawSockaddrInet4) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), getPort(&sa.Port))
}

func addrPort6(sa *unix.RawSockaddrInet6) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), getPort(&sa.Port))
}
