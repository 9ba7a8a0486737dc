//go:build linux

// The send path: Send, GSO runs, ICRC computation and the sendmmsg
// argument vector.

package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

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
// length except possibly a shorter last one, all with the same ECN
// codepoint, under maxGSOBytes in all.
func gsoRun(pkts []link.Packet, limit int) int {
	size := pkts[0].N
	total := size + wire.ICRCLen
	n := 1
	for n < len(pkts) && n < limit {
		p := &pkts[n]
		if p.Addr != pkts[0].Addr || p.ECN != pkts[0].ECN || p.N > size || p.N < 0 || p.N+wire.ICRCLen > cap(p.Buf) ||
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
	c := s.ctl[m*txCtlSpace : (m+1)*txCtlSpace]
	n := 0 // control bytes used
	if len(run) > 1 {
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		ch.Level = unix.SOL_UDP
		ch.Type = unix.UDP_SEGMENT
		ch.SetLen(txCtlLen)
		binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(run[0].N+wire.ICRCLen))
		n = txCtlSegSpace
	}
	if e := run[0].ECN; e != link.ECNNotECT {
		// The ECN codepoint, DSCP 0: IP_TOS or IPV6_TCLASS for this
		// message only (the socket also carries packets of peers that
		// did not negotiate ECN). The ICRC masks these bits.
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[n]))
		ch.Level, ch.Type = unix.IPPROTO_IP, unix.IP_TOS
		if !l.is4 {
			ch.Level, ch.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
		}
		ch.SetLen(txCtlTOSLen)
		binary.NativeEndian.PutUint32(c[n+unix.CmsgLen(0):], uint32(e&3))
		n += txCtlTOSSpace
	}
	if n > 0 {
		h.Hdr.Control = &c[0]
		h.Hdr.SetControllen(n)
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

// sendmmsg is the raw-connection callback of Send.
func (l *Link) sendmmsg(fd uintptr) bool { return l.tx.do(fd, unix.SYS_SENDMMSG) }
