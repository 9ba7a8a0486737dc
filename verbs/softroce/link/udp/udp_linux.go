//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
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
	tx     mmsgScratch
	sendF  func(fd uintptr) bool // l.sendmmsg, bound once

	recvMu sync.Mutex // guards rx and serialises Recv calls
	rx     mmsgScratch
	recvF  func(fd uintptr) bool // l.recvmmsg, bound once
}

var _ link.Link = (*Link)(nil)

// mmsgScratch is the preallocated argument vector of one direction's
// sendmmsg or recvmmsg calls, and the call's results.
type mmsgScratch struct {
	hs  []unix.Mmsghdr
	iov []unix.Iovec
	sa4 []unix.RawSockaddrInet4 // used by IPv4 links
	sa6 []unix.RawSockaddrInet6 // used by IPv6 links

	off, cnt int        // call argument: hs[off : off+cnt]
	n        int        // call result: messages transferred
	errno    unix.Errno // call result: error, or 0
}

func newScratch(batch int, is4 bool) mmsgScratch {
	s := mmsgScratch{
		hs:  make([]unix.Mmsghdr, batch),
		iov: make([]unix.Iovec, batch),
	}
	if is4 {
		s.sa4 = make([]unix.RawSockaddrInet4, batch)
	} else {
		s.sa6 = make([]unix.RawSockaddrInet6, batch)
	}
	return s
}

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
	err = rc.Control(func(fd uintptr) {
		soErr = setSockopts(int(fd), is4, cfg)
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
		tx:     newScratch(cfg.Batch, is4),
		rx:     newScratch(cfg.Batch, is4),
	}
	l.sendF = l.sendmmsg
	l.recvF = l.recvmmsg
	return l, nil
}

// setSockopts sets don't-fragment (so Linux sends IPv4 ID 0) and the
// socket buffer sizes.
func setSockopts(fd int, is4 bool, cfg Config) error {
	if is4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fmt.Errorf("setsockopt IP_MTU_DISCOVER: %w", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("setsockopt IPV6_MTU_DISCOVER: %w", err)
		}
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

// Send appends each packet's ICRC in place (computed with IPv4 ID 0) and
// transmits the packets in order with sendmmsg.
//
// A packet that cannot be sent (N+4 beyond cap(Buf), a destination of the
// other address family, or a per-packet error from the kernel such as
// EMSGSIZE or ENETUNREACH) is dropped; the packets after it are still sent,
// and Send returns an error describing the first such packet. Transient
// conditions (a full socket buffer, ENOBUFS, a pending ICMP error) are
// retried. After Close, Send returns link.ErrClosed.
func (l *Link) Send(pkts []link.Packet) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	var firstErr error
	s := &l.tx
	for i := 0; i < len(pkts); {
		k := 0
		for ; i < len(pkts) && k < l.batch; i++ {
			if err := l.packSend(s, k, &pkts[i]); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			k++
		}
		err := l.sendScratch(s, k, &firstErr)
		for j := range k {
			s.iov[j].Base = nil // do not retain the caller's buffers
		}
		if err != nil {
			return err
		}
	}
	return firstErr
}

// packSend computes p's ICRC and describes p in slot k of s.
func (l *Link) packSend(s *mmsgScratch, k int, p *link.Packet) error {
	if p.N < 0 || p.N+wire.ICRCLen > cap(p.Buf) {
		return fmt.Errorf("udp: send to %v: packet length %d needs %d bytes of buffer capacity, have %d",
			p.Addr, p.N, p.N+wire.ICRCLen, cap(p.Buf))
	}
	dip := p.Addr.Addr().Unmap()
	if !dip.IsValid() || dip.Is4() != l.is4 {
		return fmt.Errorf("udp: send to %v: address family does not match the link's %v", p.Addr, l.local)
	}
	dst := netip.AddrPortFrom(dip, p.Addr.Port())
	buf := p.Buf[:p.N+wire.ICRCLen]
	ph := wire.PseudoHeader{Src: l.local, Dst: dst}
	wire.PutICRC(buf[p.N:], wire.ComputeICRC(&ph, buf[:p.N]))

	h := &s.hs[k]
	h.Len = 0
	h.Hdr = unix.Msghdr{}
	s.iov[k].Base = &buf[0]
	s.iov[k].SetLen(len(buf))
	h.Hdr.Iov = &s.iov[k]
	h.Hdr.SetIovlen(1)
	if l.is4 {
		sa := &s.sa4[k]
		sa.Family = unix.AF_INET
		putPort(&sa.Port, dst.Port())
		sa.Addr = dip.As4()
		h.Hdr.Name = (*byte)(unsafe.Pointer(sa))
		h.Hdr.Namelen = unix.SizeofSockaddrInet4
	} else {
		sa := &s.sa6[k]
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dip.As16()}
		putPort(&sa.Port, dst.Port())
		h.Hdr.Name = (*byte)(unsafe.Pointer(sa))
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
	}
	return nil
}

// maxRefused bounds how often one message is retried after the kernel
// reported a pending ICMP error instead of sending it.
const maxRefused = 4

// sendScratch sends s.hs[:k], looping over partial sends. It returns an
// error only if the link is closed or failed; per-packet errors are noted
// in *firstErr and the packet dropped.
func (l *Link) sendScratch(s *mmsgScratch, k int, firstErr *error) error {
	refused := 0
	for sent := 0; sent < k; {
		s.off, s.cnt = sent, k-sent
		if err := l.rc.Write(l.sendF); err != nil {
			return l.ioError("send", err)
		}
		switch s.errno {
		case 0:
			sent += s.n
			refused = 0
		case unix.ENOBUFS, unix.ENOMEM:
			runtime.Gosched()
		case unix.ECONNREFUSED, unix.ECONNRESET, unix.EHOSTUNREACH, unix.ENETUNREACH:
			// A pending ICMP error reported in place of sending (only for
			// the first attempt of a message); the message itself was
			// not sent. A persistent one drops the message.
			refused++
			if refused > maxRefused {
				l.noteSendError(s, sent, firstErr)
				sent++
				refused = 0
			}
		case unix.EBADF:
			return l.ioError("send", s.errno)
		default:
			l.noteSendError(s, sent, firstErr)
			sent++
		}
	}
	return nil
}

func (l *Link) noteSendError(s *mmsgScratch, k int, firstErr *error) {
	if *firstErr != nil {
		return
	}
	var dst netip.AddrPort
	if l.is4 {
		dst = addrPort4(&s.sa4[k])
	} else {
		dst = addrPort6(&s.sa6[k])
	}
	*firstErr = fmt.Errorf("udp: send to %v: %w", dst, os.NewSyscallError("sendmmsg", s.errno))
}

// sendmmsg is the raw-connection callback of Send.
func (l *Link) sendmmsg(fd uintptr) bool {
	s := &l.tx
	for {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd,
			uintptr(unsafe.Pointer(&s.hs[s.off])), uintptr(s.cnt), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until writable
		case 0:
			s.n, s.errno = int(r), 0
		default:
			s.n, s.errno = 0, e
		}
		return true
	}
}

// recvmmsg is the raw-connection callback of Recv.
func (l *Link) recvmmsg(fd uintptr) bool {
	s := &l.rx
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&s.hs[s.off])), uintptr(s.cnt), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until readable
		case 0:
			s.n, s.errno = int(r), 0
		default:
			s.n, s.errno = 0, e
		}
		return true
	}
}

// Recv blocks until at least one packet arrives and returns up to
// min(len(pkts), Config.Batch) packets received with one recvmmsg call.
// Each datagram is received into pkts[i].Buf including its ICRC, so a
// packet of N bytes needs len(Buf) >= N+4; larger datagrams are dropped, as
// are datagrams shorter than a BTH and an ICRC (16 bytes).
//
// When datagrams are dropped, the Buf slices of pkts are permuted so that
// the packets returned are pkts[:n]; callers must not assume that pkts[i]
// keeps the Buf it had. After Close, Recv returns link.ErrClosed.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	l.recvMu.Lock()
	defer l.recvMu.Unlock()
	s := &l.rx
	want := min(len(pkts), l.batch)
	for {
		for i := range want {
			l.packRecv(s, i, pkts[i].Buf)
		}
		s.off, s.cnt = 0, want
		err := l.rc.Read(l.recvF)
		for i := range want {
			s.iov[i].Base = nil // do not retain the caller's buffers
		}
		if err != nil {
			return 0, l.ioError("recv", err)
		}
		switch s.errno {
		case 0:
		case unix.EBADF, unix.EFAULT, unix.EINVAL, unix.ENOTSOCK:
			return 0, l.ioError("recv", s.errno)
		default:
			// Errors stashed by the kernel (such as ICMP errors) or
			// transient memory shortage: nothing was received.
			continue
		}
		if n := l.unpackRecv(s, pkts); n > 0 {
			return n, nil
		}
	}
}

// packRecv describes buf as slot k of s for recvmmsg.
func (l *Link) packRecv(s *mmsgScratch, k int, buf []byte) {
	h := &s.hs[k]
	h.Len = 0
	h.Hdr = unix.Msghdr{}
	s.iov[k].Base = unsafe.SliceData(buf)
	s.iov[k].SetLen(len(buf))
	h.Hdr.Iov = &s.iov[k]
	h.Hdr.SetIovlen(1)
	if l.is4 {
		h.Hdr.Name = (*byte)(unsafe.Pointer(&s.sa4[k]))
		h.Hdr.Namelen = unix.SizeofSockaddrInet4
	} else {
		h.Hdr.Name = (*byte)(unsafe.Pointer(&s.sa6[k]))
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
	}
}

// unpackRecv turns the s.n received datagrams into packets in pkts,
// dropping malformed ones, and returns the number of packets.
func (l *Link) unpackRecv(s *mmsgScratch, pkts []link.Packet) int {
	j := 0
	for i := range s.n {
		h := &s.hs[i]
		size := int(h.Len)
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 || size < minPacket {
			continue
		}
		var src netip.AddrPort
		if l.is4 {
			if s.sa4[i].Family != unix.AF_INET {
				continue
			}
			src = addrPort4(&s.sa4[i])
		} else {
			if s.sa6[i].Family != unix.AF_INET6 {
				continue
			}
			src = addrPort6(&s.sa6[i])
		}
		if i != j {
			pkts[i].Buf, pkts[j].Buf = pkts[j].Buf, pkts[i].Buf
		}
		p := &pkts[j]
		n := size - wire.ICRCLen
		p.N = n
		p.Addr = src
		ph := wire.PseudoHeader{Src: src, Dst: l.local}
		switch {
		case wire.ComputeICRC(&ph, p.Buf[:n]) == wire.ICRCOf(p.Buf[n:size]):
			p.ICRC = link.ICRCGood
		case l.strict:
			p.ICRC = link.ICRCBad
		default:
			p.ICRC = link.ICRCUnverified
		}
		j++
	}
	return j
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
