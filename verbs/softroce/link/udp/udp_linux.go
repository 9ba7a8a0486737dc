//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
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

// Control message sizes: UDP_SEGMENT carries a uint16, UDP_GRO an int.
var (
	txCtlLen   = unix.CmsgLen(2)
	txCtlSpace = unix.CmsgSpace(2)
	rxCtlSpace = 2 * unix.CmsgSpace(4)
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
}

var _ link.Link = (*Link)(nil)

// txScratch is the preallocated argument vector of sendmmsg calls and the
// calls' results. A message carries one packet, or with GSO a run of
// packets, each in its own iovec.
type txScratch struct {
	mmsgCall                         // hs: per message
	sa4      []unix.RawSockaddrInet4 // per message, IPv4 links
	sa6      []unix.RawSockaddrInet6 // per message, IPv6 links
	ctl      []byte                  // per message, txCtlSpace bytes each
	first    []int                   // per message: index in pkts of its first packet
	segs     []int                   // per message: number of packets
	iov      []unix.Iovec            // per packet
}

// rxScratch is the preallocated argument vector of recvmmsg calls, the
// calls' results, and for GRO links the received messages not yet handed
// out.
type rxScratch struct {
	mmsgCall
	iov []unix.Iovec
	sa4 []unix.RawSockaddrInet4 // used by IPv4 links
	sa6 []unix.RawSockaddrInet6 // used by IPv6 links
	ctl []byte                  // GRO links: rxCtlSpace bytes per slot
	big []byte                  // GRO links: groSlot bytes per slot, allocated by the first Recv

	// Carry-over of a GRO link: messages hs[next:end] are still to be
	// split into packets; if inMsg, message next is split up to byte pos
	// and segment seg, into segments of gso bytes, and came from src.
	next, end int
	inMsg     bool
	pos, seg  int
	gso       int
	src       netip.AddrPort

	// idLen is the packet length whose ICRC differences by IPv4 ID are
	// in idDelta (see idDeltas); 0 if none.
	idLen   int
	idDelta [maxSegs]uint32

	// GRO slots [dirty, packed) are described for recvmmsg and untouched
	// since; the kernel rewrites the headers of the messages it fills
	// (slots [0, n) of a call), so only those need describing again.
	dirty, packed int
}

// alignedBytes returns n zero bytes aligned for a unix.Cmsghdr.
func alignedBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

func newTxScratch(batch int, is4 bool) txScratch {
	s := txScratch{
		mmsgCall: mmsgCall{hs: make([]unix.Mmsghdr, batch)},
		ctl:      alignedBytes(batch * txCtlSpace),
		first:    make([]int, batch),
		segs:     make([]int, batch),
		// A call carries up to batch messages of up to maxSegs packets.
		iov: make([]unix.Iovec, batch*maxSegs),
	}
	if is4 {
		s.sa4 = make([]unix.RawSockaddrInet4, batch)
	} else {
		s.sa6 = make([]unix.RawSockaddrInet6, batch)
	}
	return s
}

func newRxScratch(batch int, is4, gro bool) rxScratch {
	if gro {
		batch = min(batch, maxGROSlots)
	}
	s := rxScratch{
		mmsgCall: mmsgCall{hs: make([]unix.Mmsghdr, batch)},
		iov:      make([]unix.Iovec, batch),
	}
	if is4 {
		s.sa4 = make([]unix.RawSockaddrInet4, batch)
	} else {
		s.sa6 = make([]unix.RawSockaddrInet6, batch)
	}
	if gro {
		s.ctl = alignedBytes(batch * rxCtlSpace)
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

// Send appends each packet's ICRC in place and transmits the packets in
// order with sendmmsg. With GSO, each run of consecutive packets to the
// same destination with the same length N (the last of the run may be
// shorter), up to 64 packets and under 64 KiB with their ICRCs, goes as one
// message with a UDP_SEGMENT control message, and packet i of the run gets
// its ICRC computed with IPv4 ID i, the ID Linux gives it when it segments
// the message. Other packets go as plain datagrams with ICRCs for ID 0.
//
// A packet that cannot be sent (N+4 beyond cap(Buf), a destination of the
// other address family, or a per-message error from the kernel such as
// EMSGSIZE or ENETUNREACH) is dropped, with the rest of its GSO run; the
// packets after it are still sent, and Send returns an error describing the
// first such packet. Transient conditions (a full socket buffer, ENOBUFS, a
// pending ICMP error) are retried. If the kernel rejects a GSO message with
// EINVAL or EIO, the link turns GSO off and sends that message's packets
// and all later ones as plain datagrams. After Close, Send returns
// link.ErrClosed.
func (l *Link) Send(pkts []link.Packet) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	var firstErr error
	s := &l.tx
	gso := l.gso.Load()
	for i := 0; i < len(pkts); {
		m, k := 0, 0 // messages and iovecs used
		for i < len(pkts) && m < len(s.hs) && k < len(s.iov) {
			dst, err := l.checkSend(&pkts[i])
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				i++
				continue
			}
			segs := 1
			if gso {
				segs = gsoRun(pkts[i:], min(maxSegs, len(s.iov)-k))
			}
			l.packSend(s, m, k, pkts[i:i+segs], dst)
			s.first[m], s.segs[m] = i, segs
			m++
			k += segs
			i += segs
		}
		resume, err := l.sendScratch(s, m, &firstErr)
		for j := range k {
			s.iov[j].Base = nil // do not retain the caller's buffers
		}
		if err != nil {
			return err
		}
		if resume >= 0 {
			i, gso = resume, false
		}
	}
	return firstErr
}

// checkSend returns p's destination, or an error if p cannot be sent.
func (l *Link) checkSend(p *link.Packet) (netip.AddrPort, error) {
	if p.N < 0 || p.N+wire.ICRCLen > cap(p.Buf) {
		return netip.AddrPort{}, fmt.Errorf("udp: send to %v: packet length %d needs %d bytes of buffer capacity, have %d",
			p.Addr, p.N, p.N+wire.ICRCLen, cap(p.Buf))
	}
	dip := p.Addr.Addr().Unmap()
	if !dip.IsValid() || dip.Is4() != l.is4 {
		return netip.AddrPort{}, fmt.Errorf("udp: send to %v: address family does not match the link's %v", p.Addr, l.local)
	}
	return netip.AddrPortFrom(dip, p.Addr.Port()), nil
}

// gsoRun returns how many packets from pkts[0] (which is valid) form one
// GSO message: at most limit, all to the same address, all of pkts[0]'s
// length except possibly a shorter last one, under maxGSOBytes in all.
func gsoRun(pkts []link.Packet, limit int) int {
	size := pkts[0].N
	total := size + wire.ICRCLen
	n := 1
	for n < len(pkts) && n < limit {
		p := &pkts[n]
		if p.Addr != pkts[0].Addr || p.N > size || p.N < 0 || p.N+wire.ICRCLen > cap(p.Buf) ||
			total+p.N+wire.ICRCLen > maxGSOBytes {
			break
		}
		total += p.N + wire.ICRCLen
		n++
		if p.N < size {
			break
		}
	}
	return n
}

// packSend computes the ICRCs of run (packet i with IPv4 ID i) and
// describes run as message m of s, using iovecs from k on.
func (l *Link) packSend(s *txScratch, m, k int, run []link.Packet, dst netip.AddrPort) {
	ph := wire.PseudoHeader{Src: l.local, Dst: dst}
	for i := range run {
		p := &run[i]
		buf := p.Buf[:p.N+wire.ICRCLen]
		ph.IPID = uint16(i)
		wire.PutICRC(buf[p.N:], wire.ComputeICRC(&ph, buf[:p.N]))
		s.iov[k+i].Base = &buf[0]
		s.iov[k+i].SetLen(len(buf))
	}

	h := &s.hs[m]
	h.Len = 0
	h.Hdr = unix.Msghdr{}
	h.Hdr.Iov = &s.iov[k]
	h.Hdr.SetIovlen(len(run))
	if len(run) > 1 {
		c := s.ctl[m*txCtlSpace : (m+1)*txCtlSpace]
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		ch.Level = unix.SOL_UDP
		ch.Type = unix.UDP_SEGMENT
		ch.SetLen(txCtlLen)
		binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(run[0].N+wire.ICRCLen))
		h.Hdr.Control = &c[0]
		h.Hdr.SetControllen(txCtlSpace)
	}
	if l.is4 {
		sa := &s.sa4[m]
		sa.Family = unix.AF_INET
		putPort(&sa.Port, dst.Port())
		sa.Addr = dst.Addr().As4()
		h.Hdr.Name = (*byte)(unsafe.Pointer(sa))
		h.Hdr.Namelen = unix.SizeofSockaddrInet4
	} else {
		sa := &s.sa6[m]
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.Addr().As16()}
		putPort(&sa.Port, dst.Port())
		h.Hdr.Name = (*byte)(unsafe.Pointer(sa))
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
	}
}

// maxRefused bounds how often one message is retried after the kernel
// reported a pending ICMP error instead of sending it.
const maxRefused = 4

// sendScratch sends s.hs[:m], looping over partial sends. It returns an
// error only if the link is closed or failed; per-message errors are noted
// in *firstErr and the message dropped. If the kernel rejected a GSO
// message, sendScratch turns GSO off, stops, and returns the index in the
// caller's pkts of that message's first packet, from which to go on;
// otherwise it returns -1.
func (l *Link) sendScratch(s *txScratch, m int, firstErr *error) (int, error) {
	refused := 0
	for sent := 0; sent < m; {
		s.off, s.cnt = sent, m-sent
		if err := l.rc.Write(l.sendF); err != nil {
			return -1, l.ioError("send", err)
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
			return -1, l.ioError("send", s.errno)
		case unix.EINVAL, unix.EIO:
			if s.segs[sent] > 1 {
				l.gso.Store(false)
				return s.first[sent], nil
			}
			l.noteSendError(s, sent, firstErr)
			sent++
		default:
			l.noteSendError(s, sent, firstErr)
			sent++
		}
	}
	return -1, nil
}

func (l *Link) noteSendError(s *txScratch, m int, firstErr *error) {
	if *firstErr != nil {
		return
	}
	var dst netip.AddrPort
	if l.is4 {
		dst = addrPort4(&s.sa4[m])
	} else {
		dst = addrPort6(&s.sa6[m])
	}
	what := "packet"
	if s.segs[m] > 1 {
		what = fmt.Sprintf("GSO message of %d packets", s.segs[m])
	}
	*firstErr = fmt.Errorf("udp: send %s to %v: %w", what, dst, os.NewSyscallError("sendmmsg", s.errno))
}

// mmsgCall is one sendmmsg or recvmmsg call on preallocated headers.
type mmsgCall struct {
	hs       []unix.Mmsghdr
	off, cnt int        // call argument: hs[off : off+cnt]
	n        int        // call result: messages transferred
	errno    unix.Errno // call result: error, or 0
}

// do makes the system call trap on fd, as a raw-connection callback: it
// reports false on EAGAIN, so the runtime waits for readiness and calls
// again.
func (c *mmsgCall) do(fd uintptr, trap uintptr) bool {
	for {
		r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&c.hs[c.off])), uintptr(c.cnt), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			c.n, c.errno = int(r), 0
		default:
			c.n, c.errno = 0, e
		}
		return true
	}
}

// sendmmsg is the raw-connection callback of Send.
func (l *Link) sendmmsg(fd uintptr) bool { return l.tx.do(fd, unix.SYS_SENDMMSG) }

// recvmmsg is the raw-connection callback of Recv.
func (l *Link) recvmmsg(fd uintptr) bool { return l.rx.do(fd, unix.SYS_RECVMMSG) }

// Recv blocks until at least one packet arrives and returns up to
// len(pkts) packets. Datagrams shorter than a BTH and an ICRC (16 bytes)
// are dropped.
//
// With GRO, one recvmmsg call receives up to 64 messages into the link's
// scratch buffers, each message one datagram or several coalesced ones,
// and Recv returns the packets in place: it sets pkts[i].Buf to a view of
// the packet in the scratch (len and cap N+4, ICRC included), without
// copying, and the callers' own Buf slices are neither used nor kept
// (their length does not bound the packet size). A view stays intact until
// the next Recv call on the link, which may receive new data into the same
// memory. Packets that do not fit into pkts are kept for the next Recv,
// which returns them without a system call.
//
// Without GRO, one recvmmsg call receives up to min(len(pkts),
// Config.Batch) datagrams straight into the Buf slices of pkts. A packet
// of N bytes then needs len(Buf) >= N+4 (it is received with its ICRC);
// larger packets are dropped. When datagrams are dropped, the Buf slices of
// pkts are permuted so that the packets returned are pkts[:n]; callers
// must not assume that pkts[i] keeps the Buf it had.
//
// After Close, Recv returns link.ErrClosed.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	l.recvMu.Lock()
	defer l.recvMu.Unlock()
	if l.gro {
		return l.recvGRO(pkts)
	}
	return l.recvPlain(pkts)
}

// RecvLoop implements link.Looper: it receives as Recv does and hands each
// batch to handle, all within one wait on the socket. A receive call that
// returns fewer messages than it asked for emptied the socket, so the loop
// then waits for the next arrival without first making a call that could
// only come back empty. This is safe because the runtime's poller keeps an
// arrival signalled from then on (every datagram queued is an edge); a
// new Recv call instead discards that signal before its first attempt,
// which is why Recv must always try first.
func (l *Link) RecvLoop(pkts []link.Packet, handle func([]link.Packet)) error {
	if len(pkts) == 0 {
		return fmt.Errorf("udp: RecvLoop with no packets: %w", unix.EINVAL)
	}
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.recvMu.Lock()
	defer l.recvMu.Unlock()
	s := &l.rx
	if l.gro {
		if s.big == nil {
			s.big = make([]byte, len(s.hs)*groSlot)
		}
		l.handOut(s, pkts, handle) // packets a Recv call left over
	}
	var loopErr error
	err := l.rc.Read(func(fd uintptr) bool {
		for {
			var again bool
			if l.gro {
				again, loopErr = l.loopGRO(fd, s, pkts, handle)
			} else {
				again, loopErr = l.loopPlain(fd, s, pkts, handle)
			}
			if loopErr != nil {
				return true
			}
			if !again {
				return false // wait for an arrival
			}
		}
	})
	if err == nil {
		err = loopErr
	}
	return l.ioError("recv", err)
}

// loopGRO makes one receive call on a GRO link and hands what it got to
// handle. It reports whether to call again at once (the call filled every
// slot, or failed transiently) rather than wait for an arrival.
func (l *Link) loopGRO(fd uintptr, s *rxScratch, pkts []link.Packet, handle func([]link.Packet)) (bool, error) {
	cnt := len(s.hs)
	l.describeGRO(s, cnt)
	s.off, s.cnt = 0, cnt
	if !s.do(fd, unix.SYS_RECVMMSG) {
		return false, nil // EAGAIN
	}
	s.receivedGRO(cnt)
	if s.errno != 0 {
		err := recvErrno(s.errno)
		return err == nil, err
	}
	l.handOut(s, pkts, handle)
	return s.n == cnt, nil
}

// handOut hands every packet of the messages received to handle, in
// batches of up to len(pkts).
func (l *Link) handOut(s *rxScratch, pkts []link.Packet, handle func([]link.Packet)) {
	for {
		n := l.drain(s, pkts)
		if n == 0 {
			return
		}
		handle(pkts[:n])
	}
}

// loopPlain is loopGRO for a link without GRO: datagrams are received
// into the Buf slices of pkts.
func (l *Link) loopPlain(fd uintptr, s *rxScratch, pkts []link.Packet, handle func([]link.Packet)) (bool, error) {
	want := min(len(pkts), len(s.hs))
	l.describePlain(s, pkts[:want])
	s.off, s.cnt = 0, want
	done := s.do(fd, unix.SYS_RECVMMSG)
	s.forgetPlain(want)
	if !done {
		return false, nil
	}
	if s.errno != 0 {
		err := recvErrno(s.errno)
		return err == nil, err
	}
	if n := l.unpackRecv(s, pkts); n > 0 {
		handle(pkts[:n])
	}
	return s.n == want, nil
}

// recvErrno sorts the error of a receive call: fatal ones are returned;
// the others (errors stashed by the kernel, such as ICMP errors, or a
// transient memory shortage) mean only that nothing was received.
func recvErrno(e unix.Errno) error {
	switch e {
	case unix.EBADF, unix.EFAULT, unix.EINVAL, unix.ENOTSOCK:
		return e
	}
	return nil
}

// recvCall issues recvmmsg for s.hs[:cnt]. It reports whether anything was
// received, or an error if the link is closed or failed.
func (l *Link) recvCall(s *rxScratch, cnt int) (bool, error) {
	s.off, s.cnt = 0, cnt
	if err := l.rc.Read(l.recvF); err != nil {
		return false, l.ioError("recv", err)
	}
	if s.errno == 0 {
		return true, nil
	}
	if err := recvErrno(s.errno); err != nil {
		return false, l.ioError("recv", err)
	}
	return false, nil
}

func (l *Link) recvPlain(pkts []link.Packet) (int, error) {
	s := &l.rx
	want := min(len(pkts), len(s.hs))
	for {
		l.describePlain(s, pkts[:want])
		ok, err := l.recvCall(s, want)
		s.forgetPlain(want)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		if n := l.unpackRecv(s, pkts); n > 0 {
			return n, nil
		}
	}
}

// recvGRO returns packets as views into s.big. The views handed out by a
// Recv call must stay intact until the next Recv call begins, so a slot is
// received into again only when all messages of the previous recvmmsg are
// drained and this call has handed out nothing: drain returning packets
// ends the call at once, and recvmmsg runs only after a drain that
// returned none, which happens only once s.next == s.end. Views from the
// previous call are overwritten then, which the link.Link contract allows;
// messages carried over (s.next < s.end) are never overwritten before they
// are handed out.
func (l *Link) recvGRO(pkts []link.Packet) (int, error) {
	s := &l.rx
	if s.big == nil {
		s.big = make([]byte, len(s.hs)*groSlot)
	}
	for {
		if n := l.drain(s, pkts); n > 0 {
			return n, nil
		}
		// Nothing is pending (drain returns 0 only once s.next ==
		// s.end, pkts being non-empty), so every slot may be reused.
		cnt := min(len(pkts), len(s.hs))
		l.describeGRO(s, cnt)
		_, err := l.recvCall(s, cnt)
		if err != nil {
			return 0, err
		}
		s.receivedGRO(cnt)
	}
}

// describeGRO describes GRO slots [0, cnt) for recvmmsg: those the last
// call may have rewritten, and those never described.
func (l *Link) describeGRO(s *rxScratch, cnt int) {
	for i := range cnt {
		if i < s.dirty || i >= s.packed {
			l.packRecv(s, i, &s.big[i*groSlot], groSlot, s.ctl[i*rxCtlSpace:(i+1)*rxCtlSpace])
		}
	}
	s.dirty, s.packed = 0, max(s.packed, cnt)
}

// receivedGRO records the outcome of a recvmmsg over cnt GRO slots: the
// messages received are pending for drain, and the slots the call wrote
// need describing again.
func (s *rxScratch) receivedGRO(cnt int) {
	if s.errno != 0 {
		s.dirty = cnt // a failed call may have written any header
		return
	}
	s.next, s.end, s.inMsg = 0, s.n, false
	s.dirty = s.n
}

// describePlain describes the Buf slices of pkts as the receive slots of
// a link without GRO.
func (l *Link) describePlain(s *rxScratch, pkts []link.Packet) {
	for i := range pkts {
		buf := pkts[i].Buf
		l.packRecv(s, i, unsafe.SliceData(buf), len(buf), nil)
	}
}

// forgetPlain drops the references to the caller's buffers that
// describePlain put into the first n slots.
func (s *rxScratch) forgetPlain(n int) {
	for i := range n {
		s.iov[i].Base = nil
	}
}

// packRecv describes the n bytes at buf, and control buffer ctl if any, as
// slot k of s for recvmmsg.
func (l *Link) packRecv(s *rxScratch, k int, buf *byte, n int, ctl []byte) {
	h := &s.hs[k]
	h.Len = 0
	h.Hdr = unix.Msghdr{}
	s.iov[k].Base = buf
	s.iov[k].SetLen(n)
	h.Hdr.Iov = &s.iov[k]
	h.Hdr.SetIovlen(1)
	if len(ctl) > 0 {
		h.Hdr.Control = &ctl[0]
		h.Hdr.SetControllen(len(ctl))
	}
	if l.is4 {
		h.Hdr.Name = (*byte)(unsafe.Pointer(&s.sa4[k]))
		h.Hdr.Namelen = unix.SizeofSockaddrInet4
	} else {
		h.Hdr.Name = (*byte)(unsafe.Pointer(&s.sa6[k]))
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
	}
}

// source returns the sender of received message i, or false if its
// address is not of the link's family.
func (l *Link) source(s *rxScratch, i int) (netip.AddrPort, bool) {
	if l.is4 {
		if s.sa4[i].Family != unix.AF_INET {
			return netip.AddrPort{}, false
		}
		return addrPort4(&s.sa4[i]), true
	}
	if s.sa6[i].Family != unix.AF_INET6 {
		return netip.AddrPort{}, false
	}
	return addrPort6(&s.sa6[i]), true
}

// unpackRecv turns the s.n datagrams received into pkts into packets,
// dropping malformed ones, and returns the number of packets.
func (l *Link) unpackRecv(s *rxScratch, pkts []link.Packet) int {
	j := 0
	for i := range s.n {
		h := &s.hs[i]
		size := int(h.Len)
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 || size < minPacket {
			continue
		}
		src, ok := l.source(s, i)
		if !ok {
			continue
		}
		if i != j {
			pkts[i].Buf, pkts[j].Buf = pkts[j].Buf, pkts[i].Buf
		}
		p := &pkts[j]
		n := size - wire.ICRCLen
		p.N = n
		p.Addr = src
		p.ICRC = l.checkICRC(s, src, p.Buf[:n], wire.ICRCOf(p.Buf[n:size]), 0)
		j++
	}
	return j
}

// enterMsg prepares the split of received GRO message s.next and reports
// whether it is well-formed.
func (l *Link) enterMsg(s *rxScratch) bool {
	i := s.next
	h := &s.hs[i]
	size := int(h.Len)
	if h.Hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || size < minPacket {
		return false
	}
	src, ok := l.source(s, i)
	if !ok {
		return false
	}
	gso := size
	ctl := s.ctl[i*rxCtlSpace : i*rxCtlSpace+int(h.Hdr.Controllen)]
	for len(ctl) > 0 {
		ch, data, rest, err := unix.ParseOneSocketControlMessage(ctl)
		if err != nil {
			break
		}
		if ch.Level == unix.SOL_UDP && ch.Type == unix.UDP_GRO && len(data) >= 4 {
			if g := int(int32(binary.NativeEndian.Uint32(data))); g > 0 && g < size {
				gso = g
			}
		}
		ctl = rest
	}
	s.inMsg, s.pos, s.seg, s.gso, s.src = true, 0, 0, gso, src
	return true
}

// drain splits received GRO messages into pkts, from where the last call
// left off, and returns the number of packets. Each packet's Buf becomes a
// view of its segment in the scratch. Segments shorter than minPacket are
// dropped.
func (l *Link) drain(s *rxScratch, pkts []link.Packet) int {
	j := 0
	for j < len(pkts) && s.next < s.end {
		if !s.inMsg && !l.enterMsg(s) {
			s.next++
			continue
		}
		i := s.next
		size := int(s.hs[i].Len)
		seg := min(s.gso, size-s.pos)
		data := s.big[i*groSlot+s.pos : i*groSlot+s.pos+seg]
		idx := s.seg
		s.pos += seg
		s.seg++
		if s.pos >= size {
			s.next++
			s.inMsg = false
		}
		if seg < minPacket {
			continue
		}
		// Hand out a view into the scratch, capped so that appending to
		// it cannot reach the next segment. The slot is not received
		// into again before the next Recv call (see recvGRO).
		p := &pkts[j]
		p.Buf = data[:seg:seg]
		n := seg - wire.ICRCLen
		p.N = n
		p.Addr = s.src
		p.ICRC = l.checkICRC(s, s.src, data[:n], wire.ICRCOf(data[n:seg]), idx)
		j++
	}
	return j
}

// checkICRC checks the ICRC got of packet pkt from src. It tries IPv4 ID
// hint (the packet's index in a coalesced message), then ID 0, then IDs 1
// to maxSegs-1 (a GSO sender's segments received one by one).
func (l *Link) checkICRC(s *rxScratch, src netip.AddrPort, pkt []byte, got uint32, hint int) link.ICRCStatus {
	ph := wire.PseudoHeader{Src: src, Dst: l.local}
	if l.is4 && hint != 0 {
		ph.IPID = uint16(hint)
		if wire.ComputeICRC(&ph, pkt) == got {
			return link.ICRCGood
		}
		ph.IPID = 0
	}
	diff := wire.ComputeICRC(&ph, pkt) ^ got
	if diff == 0 || l.is4 && s.idMatch(len(pkt), diff) {
		return link.ICRCGood
	}
	if l.strict {
		return link.ICRCBad
	}
	return link.ICRCUnverified
}

// idMatch reports whether diff, the ICRC received for an IPv4 packet of n
// bytes XOR the ICRC computed for IPv4 ID 0, is the difference that some ID
// in 1 to maxSegs-1 makes.
func (s *rxScratch) idMatch(n int, diff uint32) bool {
	if s.idLen != n {
		idDeltas(&s.idDelta, n)
		s.idLen = n
	}
	for _, d := range s.idDelta[1:] {
		if d == diff {
			return true
		}
	}
	return false
}

// zeros feeds runs of zero bytes to the CRC in idDeltas.
var zeros [4096]byte

// idDeltas sets d[id] to ICRC(ID id) XOR ICRC(ID 0) for an IPv4 RoCEv2
// packet of n bytes; the difference depends on nothing but id and n.
//
// The CRC is affine in its input, so for two inputs of the same length the
// XOR of their CRCs is the CRC register, started at zero and without the
// final inversion, of the XOR of the inputs: here the ID field alone (the
// two bytes at offset 12, after 8 bytes of 0xFF and 4 of the IPv4 header)
// followed by zeros to the end of the ICRC's input (14 more bytes of the
// IPv4 header, 8 of the UDP header, and the packet). That is linear in the
// ID, so d is built from the deltas of the low ID bits.
func idDeltas(d *[maxSegs]uint32, n int) {
	var basis [idBits]uint32
	for b := range basis {
		// The register after the ID bytes {0, 1<<b} from zero.
		r := crc32.IEEETable[1<<b]
		// Then the zero bytes after them; crc32.Update takes and
		// returns the register inverted.
		r = ^r
		for z := 14 + 8 + n; z > 0; z -= len(zeros) {
			r = crc32.Update(r, crc32.IEEETable, zeros[:min(z, len(zeros))])
		}
		basis[b] = ^r
	}
	d[0] = 0
	for id := 1; id < maxSegs; id++ {
		d[id] = d[id&(id-1)] ^ basis[bits.TrailingZeros(uint(id))]
	}
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
