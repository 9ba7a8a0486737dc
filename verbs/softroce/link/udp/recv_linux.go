//go:build linux

// The receive path shared by Recv and RecvLoop: the recvmmsg argument
// vector, one receive step for plain and GRO links, and the split of
// received messages into packets.

package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// rxScratch is the preallocated argument vector of recvmmsg calls, the
// calls' results, and for GRO links the received messages not yet handed
// out.
type rxScratch struct {
	mmsgCall
	iov []unix.Iovec
	sa4 []unix.RawSockaddrInet4 // used by IPv4 links
	sa6 []unix.RawSockaddrInet6 // used by IPv6 links
	ctl []byte                  // rxCtlSpace bytes per slot
	big []byte                  // GRO links: groSlot bytes per slot, allocated by the first receive call

	// Carry-over of a GRO link: messages hs[next:end] are still to be
	// split into packets; if inMsg, message next is split up to byte pos
	// and segment seg, into segments of gso bytes, and came from src.
	next, end int
	inMsg     bool
	pos, seg  int
	gso       int
	src       netip.AddrPort
	ecn       link.ECN
	arrived   int64 // the current message's kernel timestamp

	// ids holds how the ICRC changes with the IPv4 ID, by packet length.
	ids idCache

	// GRO slots [dirty, packed) are described for recvmmsg and untouched
	// since; the kernel rewrites the headers of the messages it fills
	// (slots [0, n) of a call), so only those need describing again.
	dirty, packed int

	// The argument and results of the Recv callback (l.recvmmsg): the
	// caller's packets and the number of slots to receive into, and the
	// number of packets and error of the receive step.
	pkts  []link.Packet
	slots int
	got   int
	err   error
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
	s.ctl = alignedBytes(batch * rxCtlSpace)
	return s
}

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
	s := &l.rx
	if l.gro {
		if n := l.drain(s, pkts); n > 0 {
			return n, nil // packets the last call left over
		}
	}
	// Each receive step is a Read of its own, which tries the socket
	// before it waits (see RecvLoop).
	s.pkts, s.slots = pkts, min(len(pkts), len(s.hs))
	n, err := 0, error(nil)
	for n == 0 && err == nil {
		if err = l.rc.Read(l.recvF); err == nil {
			n, err = s.got, s.err
		}
	}
	s.pkts, s.err = nil, nil // do not retain the caller's packets
	if err != nil {
		return 0, l.ioError("recv", err)
	}
	return n, nil
}

// recvmmsg is the raw-connection callback of Recv: one receive step into
// s.pkts over s.slots slots, which leaves its packets and error in s.got
// and s.err.
func (l *Link) recvmmsg(fd uintptr) bool {
	s := &l.rx
	var ok bool
	s.got, ok, s.err = l.recvStep(fd, s, s.pkts, s.slots)
	return ok
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
	cnt := min(len(pkts), len(s.hs))
	if l.gro {
		cnt = len(s.hs)            // every slot: packets beyond len(pkts) are handed out in turn
		l.handOut(s, pkts, handle) // packets a Recv call left over
	}
	var loopErr error
	err := l.rc.Read(func(fd uintptr) bool {
		for {
			n, ok, err := l.recvStep(fd, s, pkts, cnt)
			if !ok {
				return false // EAGAIN: wait for an arrival
			}
			if err != nil {
				loopErr = err
				return true
			}
			if n > 0 {
				handle(pkts[:n])
			}
			if l.gro {
				l.handOut(s, pkts, handle)
			}
			// Call again at once if the call filled every slot, or
			// failed transiently; otherwise it emptied the socket.
			if s.errno == 0 && s.n < cnt {
				return false // wait for an arrival
			}
		}
	})
	if err == nil {
		err = loopErr
	}
	return l.ioError("recv", err)
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

// recvStep is the one receive path of Recv and RecvLoop: it makes one
// recvmmsg call on fd over slots [0, cnt) and returns the first packets
// received in pkts[:n] (on a GRO link, those that do not fit stay pending
// in s for drain). It reports false if the socket was empty (EAGAIN), so
// that the caller waits for readiness, and returns an error if the call
// failed fatally. Other failures (see recvErrno) return no packets and
// leave s.errno set.
func (l *Link) recvStep(fd uintptr, s *rxScratch, pkts []link.Packet, cnt int) (n int, ok bool, err error) {
	if l.gro {
		return l.recvGRO(fd, s, pkts, cnt)
	}
	return l.recvPlain(fd, s, pkts, cnt)
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

// recvPlain is recvStep for a link without GRO: datagrams are received
// into the Buf slices of pkts.
func (l *Link) recvPlain(fd uintptr, s *rxScratch, pkts []link.Packet, cnt int) (int, bool, error) {
	l.describePlain(s, pkts[:cnt])
	s.off, s.cnt = 0, cnt
	ok := s.do(fd, unix.SYS_RECVMMSG)
	s.forgetPlain(cnt)
	if !ok {
		return 0, false, nil
	}
	if s.errno != 0 {
		return 0, true, recvErrno(s.errno)
	}
	return l.unpackRecv(s, pkts), true, nil
}

// recvGRO is recvStep for a GRO link; it returns packets as views into
// s.big. The views handed out by a Recv call must stay intact until the
// next Recv call begins, so a slot is received into again only when all
// messages of the previous recvmmsg are drained and this call has handed
// out nothing: drain returning packets ends the call at once, and recvmmsg
// runs only after a drain that returned none, which happens only once
// s.next == s.end. Views from the previous call are overwritten then,
// which the link.Link contract allows; messages carried over (s.next <
// s.end) are never overwritten before they are handed out.
func (l *Link) recvGRO(fd uintptr, s *rxScratch, pkts []link.Packet, cnt int) (int, bool, error) {
	// Nothing is pending (drain returns 0 only once s.next == s.end,
	// pkts being non-empty), so every slot may be reused.
	l.describeGRO(s, cnt)
	s.off, s.cnt = 0, cnt
	if !s.do(fd, unix.SYS_RECVMMSG) {
		return 0, false, nil
	}
	s.receivedGRO(cnt)
	if s.errno != 0 {
		return 0, true, recvErrno(s.errno)
	}
	return l.drain(s, pkts), true, nil
}

// describeGRO describes GRO slots [0, cnt) for recvmmsg: those the last
// call may have rewritten, and those never described. The first call
// allocates the slots' buffers.
func (l *Link) describeGRO(s *rxScratch, cnt int) {
	if s.big == nil {
		s.big = make([]byte, len(s.hs)*groSlot)
	}
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
		l.packRecv(s, i, unsafe.SliceData(buf), len(buf), s.ctl[i*rxCtlSpace:(i+1)*rxCtlSpace])
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
			l.drops.Add(1)
			continue
		}
		src, ok := l.source(s, i)
		if !ok {
			l.drops.Add(1)
			continue
		}
		if i != j {
			pkts[i].Buf, pkts[j].Buf = pkts[j].Buf, pkts[i].Buf
		}
		p := &pkts[j]
		n := size - wire.ICRCLen
		p.N = n
		p.Addr = src
		_, p.ECN, p.Arrived = parseControl(s.ctl[i*rxCtlSpace : i*rxCtlSpace+int(h.Hdr.Controllen)])
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
		l.drops.Add(1)
		return false
	}
	src, ok := l.source(s, i)
	if !ok {
		l.drops.Add(1)
		return false
	}
	gso, ecn, at := parseControl(s.ctl[i*rxCtlSpace : i*rxCtlSpace+int(h.Hdr.Controllen)])
	if gso <= 0 || gso >= size {
		gso = size
	}
	s.inMsg, s.pos, s.seg, s.gso, s.src, s.ecn, s.arrived = true, 0, 0, gso, src, ecn, at
	return true
}

// parseControl reads a received message's control messages: the segment
// size of a coalesced message (UDP_GRO; 0 if none) and the ECN codepoint
// of its TOS or traffic class (IP_TOS, IPV6_TCLASS; Not-ECT if none). The
// kernel coalesces only datagrams with the same TOS (inet_gro_receive and
// ipv6_gro_receive flush on a difference), so the one codepoint is every
// segment's.
func parseControl(ctl []byte) (gso int, ecn link.ECN, arrived int64) {
	for len(ctl) > 0 {
		ch, data, rest, err := unix.ParseOneSocketControlMessage(ctl)
		if err != nil {
			break
		}
		switch {
		case ch.Level == unix.SOL_UDP && ch.Type == unix.UDP_GRO && len(data) >= 4:
			gso = int(int32(binary.NativeEndian.Uint32(data)))
		case ch.Level == unix.IPPROTO_IP && ch.Type == unix.IP_TOS && len(data) >= 1:
			ecn = link.ECN(data[0] & 3)
		case ch.Level == unix.IPPROTO_IPV6 && ch.Type == unix.IPV6_TCLASS && len(data) >= 4:
			ecn = link.ECN(binary.NativeEndian.Uint32(data) & 3)
		case ch.Level == unix.SOL_SOCKET && ch.Type == unix.SCM_TIMESTAMPNS && len(data) >= sizeofTimespec:
			ts := (*unix.Timespec)(unsafe.Pointer(&data[0]))
			arrived = ts.Nano()
		}
		ctl = rest
	}
	return gso, ecn, arrived
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
			l.drops.Add(1)
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
		p.ECN = s.ecn
		p.Arrived = s.arrived
		p.ICRC = l.checkICRC(s, s.src, data[:n], wire.ICRCOf(data[n:seg]), idx)
		j++
	}
	return j
}
