package softroce

import (
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// responderState is the receive side of the QP.
type responderState struct {
	epsn    uint32 // the PSN expected next
	msn     uint32 // messages completed, modulo 2^24
	nakSent bool   // a sequence or RNR NAK was sent for the current gap

	ackPending bool   // an ACK for ackPSN is owed
	ackPSN     uint32 //
	ackQueued  bool   // the QP is on the receiver's list of owed ACKs
	ackUrgent  bool   // the owed ACK must not be delayed (it answers a duplicate)
	unacked    int    // request packets accepted since the last ACK or NAK
	ackDue     int64  // when a delayed ACK goes out (monotonic ns), 0 if none

	// placed records the request packets placed past a gap (selective
	// repeat only).
	placed recvBitmap
	// immAhead holds, by PSN, the immediate data and message length of
	// the WRITE ONLY with immediate packets placed past a gap: their
	// receive completions wait for the gap to fill (takePlaced).
	immAhead map[uint32]immPlaced
	// aheadWCs are the completions of those whose turn came, pushed
	// after doneWC.
	aheadWCs []verbs.WC
	// newest is the newest request PSN that arrived past a gap, placed or
	// not: the requester learns from it that what it sent before is late.
	newest    uint32
	newestSet bool

	inSend  bool   // a multi-packet SEND is in progress into the head receive WQE
	recvOff uint64 // bytes of it placed so far

	// doneWC is the receive completion of the message just finished,
	// pushed after its ACK is recorded.
	doneWC    verbs.WC
	hasDoneWC bool

	inWrite bool   // a multi-packet RDMA WRITE is in progress
	wVA     uint64 // where its next payload goes
	wRKey   uint32
	wLeft   uint64 // bytes it still has to bring
	wTotal  uint64 // its DMA length

	// res remembers the last max_dest_rd_atomic READ and atomic
	// requests, to answer their duplicates.
	res     []rdAtomicRes
	resNext int

	// seen records, by PSN, what each SEND and WRITE packet accepted
	// lately looked like, so that a duplicate can be told from a packet
	// that is not a copy of what took its PSN: see checkDuplicate.
	seen [seenPSNs]uint64

	// reading is the READ being answered, and readDue when the timer
	// sends its next burst (monotonic ns), 0 if none.
	reading readProgress
	readDue int64
}

// seenPSNs is how many recent request PSNs the responder remembers the
// shape of (a power of two).
const seenPSNs = 128

// shapeOf is what a retransmission of a SEND or WRITE packet repeats
// exactly: its PSN, opcode and payload length (IBA 9.4: a retried request
// is the same packet). Zero means nothing recorded.
func shapeOf(pkt *wire.Packet) uint64 {
	return 1<<63 | uint64(pkt.BTH.PSN())<<32 | uint64(pkt.BTH.Opcode())<<16 | uint64(len(pkt.Payload)&0xffff)
}

// noteSeen records the shape of an accepted SEND or WRITE packet.
func (r *responderState) noteSeen(pkt *wire.Packet) {
	r.seen[pkt.BTH.PSN()%seenPSNs] = shapeOf(pkt)
}

// rdAtomicRes is an atomic request the responder executed, kept to answer
// a repeated request without executing it twice.
type rdAtomicRes struct {
	valid bool
	read  bool
	psn   uint32
	orig  uint64 // the value returned (atomics)
	// A READ: its last PSN, and the region it read.
	last uint32
	va   uint64
	rkey uint32
	n    uint64
}

func (r *responderState) reset(epsn uint32, resources int) {
	*r = responderState{epsn: epsn, res: make([]rdAtomicRes, resources)}
}

// remember records a READ or atomic for duplicate handling.
func (r *responderState) remember(x rdAtomicRes) {
	if len(r.res) == 0 {
		return
	}
	x.valid = true
	r.res[r.resNext] = x
	r.resNext = (r.resNext + 1) % len(r.res)
}

// respond handles a request packet addressed to this QP. The caller
// holds q.mu.
func (q *QP) respond(pkt *wire.Packet, rx *receiver) {
	switch q.attr.State {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	default:
		q.count(cUnknownQP, 1)
		return
	}
	r := &q.resp
	psn := pkt.BTH.PSN()
	if r.reading.active {
		// A READ is being answered: responses go out in PSN order, so
		// every other request waits (the requester sends it again). The
		// same READ asked again is the requester going back after a
		// timeout: it drops responses past the PSN it asks for, so the
		// answer starts over from there (still readBurst packets per
		// received packet). Dropping it instead left the requester
		// timing out against responses it no longer took.
		x := &r.reading.res
		if pkt.BTH.Opcode().Flags().Has(wire.FlagRead) && psnDiff(psn, x.psn) >= 0 && psnDiff(psn, x.last) <= 0 {
			q.noteDuplicate(psn, rx)
			res := *x
			q.startRead(rx, &res, uint32(psnDiff(psn, res.psn)))
			return
		}
		q.count(cOutOfSequence, 1)
		return
	}
	switch d := psnDiff(psn, r.epsn); {
	case d > 0 && q.selective:
		q.placeAhead(pkt, rx, d)
		return
	case d > 0:
		q.count(cOutOfSequence, 1)
		if !r.nakSent {
			r.nakSent = true
			q.count(cSeqNAKsSent, 1)
			q.sendAETH(rx, r.epsn, wire.NAKSyndrome(wire.NAKPSNSeqErr))
		}
		return
	case d < 0:
		q.noteDuplicate(psn, rx)
		q.duplicate(pkt, rx)
		return
	}
	fl := pkt.BTH.Opcode().Flags()
	// Opcode sequence (IBA 9.7.4.1.3): a message in progress continues
	// with its own middle or last packets only.
	switch {
	case r.inSend && !(fl.Has(wire.FlagSend) && !fl.Has(wire.FlagFirst)),
		r.inWrite && !(fl.Has(wire.FlagWrite) && !fl.Has(wire.FlagFirst)),
		!r.inSend && fl.Has(wire.FlagSend) && !fl.Has(wire.FlagFirst),
		!r.inWrite && fl.Has(wire.FlagWrite) && !fl.Has(wire.FlagFirst):
		q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
		return
	}
	var ok bool
	before := r.epsn
	switch {
	case fl.Has(wire.FlagSend):
		ok = q.recvSend(pkt, rx)
	case fl.Has(wire.FlagWrite):
		ok = q.recvWrite(pkt, rx)
	case fl.Has(wire.FlagRead):
		ok = q.recvRead(pkt, rx)
	case fl.Has(wire.FlagAtomic):
		ok = q.recvAtomic(pkt, rx)
	}
	if !ok {
		return
	}
	if fl.Has(wire.FlagSend) || fl.Has(wire.FlagWrite) {
		r.noteSeen(pkt)
	}
	if !r.placed.empty() {
		// A READ consumes several PSNs at once; a peer that placed
		// requests inside them broke the rules, and they are forgotten.
		for i := uint32(1); psnDiff(r.epsn, psnAdd(before, i)) > 0 && i < uint32(r.placed.window()); i++ {
			r.placed.take(psnAdd(before, i))
			delete(r.immAhead, psnAdd(before, i))
		}
		if !q.takePlaced(rx) {
			return
		}
	}
	r.nakSent = false
	if fl.Has(wire.FlagRead) || fl.Has(wire.FlagAtomic) {
		r.unacked = 0 // answered already
		q.pushAheadWCs()
		return
	}
	r.unacked++
	if pkt.BTH.AckReq() {
		q.owe(rx, psn)
	}
	// The receive completion goes out only now that the ACK is recorded:
	// an application that closes the QP as soon as it sees the completion
	// still has the ACK sent by Close (flushOwedAck).
	if r.hasDoneWC {
		r.hasDoneWC = false
		q.recvCQ.push(&r.doneWC)
	}
	q.pushAheadWCs()
}

// pushAheadWCs pushes the completions of WRITEs with immediate placed
// past a gap whose turn has come (takePlaced).
func (q *QP) pushAheadWCs() {
	r := &q.resp
	for i := range r.aheadWCs {
		q.recvCQ.push(&r.aheadWCs[i])
	}
	r.aheadWCs = r.aheadWCs[:0]
}

// payloadOK checks a SEND or WRITE packet's payload length against the
// path MTU: first and middle packets are full, none is larger.
func (q *QP) payloadOK(fl wire.OpFlags, n int) bool {
	if n > int(q.mtu) {
		return false
	}
	return fl.Has(wire.FlagLast) || n == int(q.mtu)
}

// recvSend places a SEND packet into the head receive WQE.
func (q *QP) recvSend(pkt *wire.Packet, rx *receiver) bool {
	r := &q.resp
	fl := pkt.BTH.Opcode().Flags()
	psn := pkt.BTH.PSN()
	if !q.payloadOK(fl, len(pkt.Payload)) {
		q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, r.inSend)
		return false
	}
	if fl.Has(wire.FlagFirst) {
		if q.rqHead == q.rqTail {
			q.rnrNAK(rx, psn)
			return false
		}
		r.inSend = true
		r.recvOff = 0
	}
	w := &q.rq[q.rqHead%uint32(len(q.rq))]
	n := uint64(len(pkt.Payload))
	if r.recvOff+n > sglLen(w.sgl) {
		q.recvCQ.push(&verbs.WC{WRID: w.id, Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv, QPN: q.qpn})
		q.rqHead++
		q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
		return false
	}
	if n > 0 && !q.dev.scatter(q.pd, w.sgl, r.recvOff, pkt.Payload) {
		q.recvCQ.push(&verbs.WC{WRID: w.id, Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv, QPN: q.qpn})
		q.rqHead++
		q.respondError(rx, psn, wire.NAKRemoteOp, verbs.WCRemOpErr, false)
		return false
	}
	r.recvOff += n
	r.epsn = psnAdd(r.epsn, 1)
	if fl.Has(wire.FlagLast) {
		wc := verbs.WC{WRID: w.id, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(r.recvOff), QPN: q.qpn}
		if fl.Has(wire.FlagImm) {
			wc.Flags = verbs.WCWithImm
			wc.Imm = pkt.Imm.Imm()
		}
		q.rqHead++
		r.inSend = false
		r.msn = psnAdd(r.msn, 1)
		r.doneWC, r.hasDoneWC = wc, true
	}
	return true
}

// recvWrite executes an RDMA WRITE packet.
func (q *QP) recvWrite(pkt *wire.Packet, rx *receiver) bool {
	r := &q.resp
	fl := pkt.BTH.Opcode().Flags()
	psn := pkt.BTH.PSN()
	if fl.Has(wire.FlagFirst) {
		va, rkey, n := pkt.RETH.VA(), pkt.RETH.RKey(), uint64(pkt.RETH.DMALen())
		if n > 1<<31 {
			q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
			return false
		}
		if !q.dev.remoteCheck(q.pd, q.attr.AccessFlags, rkey, va, n, verbs.AccessRemoteWrite) {
			q.count(cAccessErrors, 1)
			q.respondError(rx, psn, wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
			return false
		}
		r.wVA, r.wRKey, r.wLeft, r.wTotal = va, rkey, n, n
		if m := uint64(len(pkt.Payload)); q.selective && fl.Has(wire.FlagLast|wire.FlagImm) && m < n {
			// Selective repeat: the last part of a longer WRITE with
			// immediate, whose RETH names the whole message.
			if m != lastPartLen(n, uint64(q.mtu)) {
				q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
				return false
			}
			r.wVA, r.wLeft = va+n-m, m
		}
	}
	n := uint64(len(pkt.Payload))
	last := fl.Has(wire.FlagLast)
	if !q.payloadOK(fl, len(pkt.Payload)) || n > r.wLeft || (last && n != r.wLeft) {
		q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
		return false
	}
	if last && fl.Has(wire.FlagImm) && q.rqHead == q.rqTail {
		q.rnrNAK(rx, psn) // before touching memory, so the retry finds it as it was
		r.inWrite = !fl.Has(wire.FlagFirst)
		return false
	}
	if n > 0 && !q.dev.remoteWrite(q.pd, q.attr.AccessFlags, r.wRKey, r.wVA, pkt.Payload) {
		q.count(cAccessErrors, 1)
		q.respondError(rx, psn, wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
		return false
	}
	r.wVA += n
	r.wLeft -= n
	r.inWrite = !last
	r.epsn = psnAdd(r.epsn, 1)
	if last {
		r.msn = psnAdd(r.msn, 1)
		if fl.Has(wire.FlagImm) {
			w := &q.rq[q.rqHead%uint32(len(q.rq))]
			q.rqHead++
			r.doneWC = verbs.WC{WRID: w.id, Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm,
				Flags: verbs.WCWithImm, Imm: pkt.Imm.Imm(), ByteLen: uint32(r.wTotal), QPN: q.qpn}
			r.hasDoneWC = true
		}
	}
	return true
}

// recvRead executes an RDMA READ request: it remembers it among the
// max_dest_rd_atomic resources, for duplicates, and answers it: up to
// readBurst packets now, the rest from the QP's timer (see continueRead),
// so that one READ of up to 2 GiB does not hold the receive loop.
func (q *QP) recvRead(pkt *wire.Packet, rx *receiver) bool {
	r := &q.resp
	psn := pkt.BTH.PSN()
	va, rkey, n := pkt.RETH.VA(), pkt.RETH.RKey(), uint64(pkt.RETH.DMALen())
	if len(r.res) == 0 || n > 1<<31 {
		q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
		return false
	}
	if !q.dev.remoteCheck(q.pd, q.attr.AccessFlags, rkey, va, n, verbs.AccessRemoteRead) {
		q.count(cAccessErrors, 1)
		q.respondError(rx, psn, wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
		return false
	}
	npkts := max(uint32((n+uint64(q.mtu)-1)/uint64(q.mtu)), 1)
	r.epsn = psnAdd(psn, npkts)
	r.msn = psnAdd(r.msn, 1)
	x := rdAtomicRes{read: true, psn: psn, last: psnAdd(psn, npkts-1), va: va, rkey: rkey, n: n}
	r.remember(x)
	q.startRead(rx, &x, 0)
	return true
}

// readBurst bounds the READ response packets built for one received
// packet, or one run of the QP's timer.
const readBurst = 32

// readProgress is a READ being answered: the response packets from next
// on are still to be sent.
type readProgress struct {
	active bool
	res    rdAtomicRes
	next   uint32
	npkts  uint32
}

// startRead answers READ x from its response packet first on: up to
// readBurst packets into rx's batch, the rest from the timer, which rx
// arms once it has sent that batch. While a READ is answered, later
// requests wait (dropped: the requester sends them again), since
// responses go out in PSN order.
func (q *QP) startRead(rx *receiver, x *rdAtomicRes, first uint32) {
	r := &q.resp
	npkts := uint32(psnDiff(x.last, x.psn)) + 1
	r.reading = readProgress{active: true, res: *x, next: first, npkts: npkts}
	r.readDue = 0
	q.sendReadBurst(rx.packet, rx.unget, rx)
	if r.reading.active {
		rx.reads = append(rx.reads, q)
	}
}

// continueReadLater has the timer send the next burst of the READ being
// answered, if one is. The caller holds q.mu.
func (q *QP) continueReadLater() {
	if q.closed || !q.resp.reading.active || q.resp.readDue != 0 {
		return
	}
	q.resp.readDue = nanotime()
	q.armTimer()
}

// continueRead sends the next burst of the READ being answered, from the
// QP's timer. The caller holds q.mu.
func (q *QP) continueRead() {
	if !q.resp.reading.active {
		return
	}
	q.sendReadBurst(q.txPacket, func() { q.txN-- }, nil)
	q.continueReadLater()
	q.transmit()
}

// sendReadBurst builds up to readBurst response packets of the READ being
// answered with get (and gives one back with unget). An access that fails
// (the MR went away) ends the READ with a NAK; rx is nil off the receive
// loop.
func (q *QP) sendReadBurst(get func() *link.Packet, unget func(), rx *receiver) {
	rd := &q.resp.reading
	x := &rd.res
	mtu := uint64(q.mtu)
	for k := 0; k < readBurst && rd.next < rd.npkts; k++ {
		i := uint64(rd.next)
		off := i * mtu
		size := min(x.n-off, mtu)
		var op wire.Opcode
		switch {
		case rd.npkts == 1:
			op = wire.RCReadResponseOnly
		case i == 0:
			op = wire.RCReadResponseFirst
		case i == uint64(rd.npkts-1):
			op = wire.RCReadResponseLast
		default:
			op = wire.RCReadResponseMiddle
		}
		psn := psnAdd(x.psn, rd.next)
		p := get()
		hlen := op.HeaderLen()
		pad := wire.PadFor(int(size))
		b := p.Buf[:hlen+int(size)+pad]
		q.encodeResponseBTH(b, op, psn, uint8(pad))
		if op.Flags().Has(wire.FlagAETH) {
			wire.AETH(b[wire.BTHLen:]).Encode(wire.ACKSyndrome(31), q.resp.msn)
		}
		if size > 0 && !q.dev.remoteRead(q.pd, q.attr.AccessFlags, x.rkey, x.va+off, b[hlen:hlen+int(size)]) {
			// The MR went away under the READ.
			unget()
			rd.active = false
			q.count(cAccessErrors, 1)
			if rx != nil {
				q.respondError(rx, psn, wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
			} else {
				q.noteAETHSent(psn)
				q.buildAETH(q.txPacket(), psn, wire.NAKSyndrome(wire.NAKRemoteAccess))
				q.fail(q.sqHead, verbs.WCWRFlushErr)
			}
			return
		}
		clear(b[hlen+int(size):])
		p.N = len(b)
		p.Addr = q.peer
		rd.next++
	}
	if rd.next == rd.npkts {
		rd.active = false
	}
}

// recvAtomic executes an atomic request and answers it.
func (q *QP) recvAtomic(pkt *wire.Packet, rx *receiver) bool {
	r := &q.resp
	psn := pkt.BTH.PSN()
	a := pkt.AtomicETH
	if len(r.res) == 0 || a.VA()%8 != 0 {
		q.respondError(rx, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
		return false
	}
	cmpSwap := pkt.BTH.Opcode() == wire.RCCompareSwap
	orig, ok := q.dev.remoteAtomic(q.pd, q.attr.AccessFlags, a.RKey(), a.VA(), cmpSwap, a.SwapAdd(), a.Compare())
	if !ok {
		q.count(cAccessErrors, 1)
		q.respondError(rx, psn, wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
		return false
	}
	r.remember(rdAtomicRes{psn: psn, last: psn, orig: orig})
	r.epsn = psnAdd(psn, 1)
	r.msn = psnAdd(r.msn, 1)
	q.sendAtomicAck(rx, psn, orig)
	return true
}

func (q *QP) sendAtomicAck(rx *receiver, psn uint32, orig uint64) {
	p := rx.packet()
	b := p.Buf[:wire.BTHLen+wire.AETHLen+wire.AtomicAckETHLen]
	q.encodeResponseBTH(b, wire.RCAtomicAcknowledge, psn, 0)
	wire.AETH(b[wire.BTHLen:]).Encode(wire.ACKSyndrome(31), q.resp.msn)
	wire.AtomicAckETH(b[wire.BTHLen+wire.AETHLen:]).Set(orig)
	p.N = len(b)
	p.Addr = q.peer
}

// duplicate answers a request whose PSN is older than expected: SENDs and
// WRITEs are acknowledged again, READs are answered again from the
// resource the original left (never from the duplicate's own RETH), and
// atomics from the saved result.
func (q *QP) duplicate(pkt *wire.Packet, rx *receiver) {
	r := &q.resp
	psn := pkt.BTH.PSN()
	fl := pkt.BTH.Opcode().Flags()
	if !fl.Has(wire.FlagRead) && !fl.Has(wire.FlagAtomic) {
		if !q.checkDuplicate(pkt, rx) {
			return
		}
		r.ackUrgent = true // the requester is retrying: stop it quickly
		q.owe(rx, psnAdd(r.epsn, wire.PSNMask))
		return
	}
	for i := range r.res {
		x := &r.res[i]
		if !x.valid || x.read != fl.Has(wire.FlagRead) {
			continue
		}
		if !x.read && x.psn == psn {
			q.sendAtomicAck(rx, psn, x.orig)
			return
		}
		if x.read && psnDiff(psn, x.psn) >= 0 && psnDiff(psn, x.last) <= 0 {
			// A repeated READ asks again from one of the original's
			// PSNs: answer that part of the original, at most
			// readReplay packets for this request packet.
			q.startRead(rx, x, uint32(psnDiff(psn, x.psn)))
			return
		}
	}
	// A READ or atomic the responder no longer (or never) answered: it
	// is not executed again from the duplicate's own headers.
}

// checkDuplicate reports whether a SEND or WRITE packet behind the
// expected PSN is a copy of the packet that took its PSN. One that is
// not (another opcode or length) means that a packet the requester never
// sent took the PSN (a spoofed one, or a zero-length WRITE, which carries
// no key, at the expected PSN): the stream cannot be trusted any more, and
// the QP fails rather than acknowledge data it dropped.
func (q *QP) checkDuplicate(pkt *wire.Packet, rx *receiver) bool {
	r := &q.resp
	psn := pkt.BTH.PSN()
	was := r.seen[psn%seenPSNs]
	if was == 0 || uint32(was>>32)&wire.PSNMask != psn || was == shapeOf(pkt) {
		return true // a copy, or too old to tell
	}
	q.respondError(rx, r.epsn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, false)
	return false
}

// owe schedules a coalesced ACK of psn, sent when the receiver finishes
// its batch.
func (q *QP) owe(rx *receiver, psn uint32) {
	r := &q.resp
	if !r.ackPending || psnDiff(psn, r.ackPSN) > 0 {
		r.ackPSN = psn
	}
	r.ackPending = true
	q.queueOwed(rx)
}

// queueOwed puts the QP on the receiver's list of QPs to answer at the end
// of the batch (an ACK, echoes), once.
func (q *QP) queueOwed(rx *receiver) {
	if !q.resp.ackQueued {
		q.resp.ackQueued = true
		rx.owed = append(rx.owed, q)
	}
}

// sendOwedAck sends the coalesced ACK, if one is still owed.
func (q *QP) sendOwedAck(rx *receiver) {
	r := &q.resp
	r.ackQueued = false
	if !r.ackPending {
		return
	}
	switch q.attr.State {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	default:
		r.ackPending = false
		return
	}
	if !r.placed.empty() {
		r.ackPending = false
		q.sendHoldEcho(rx)
		q.buildSelectiveNAK(rx.packet())
		return
	}
	// With an ACK delay configured, light traffic (a request/response
	// exchange) holds its ACK a little, so that one ACK covers several
	// messages instead of costing a packet and a wake-up per message; a
	// burst is acknowledged at once. Without one, as RNICs do, the ACK goes
	// out at the end of the receive batch.
	if d := q.dev.ackDelay; d > 0 && !r.ackUrgent && r.unacked < delayedAckPackets {
		if r.ackDue == 0 {
			r.ackDue = nanotime() + d
			q.armTimer()
		}
		return
	}
	r.ackPending = false
	q.sendHoldEcho(rx)
	q.sendAETH(rx, r.ackPSN, wire.ACKSyndrome(31))
}

// delayedAckPackets is the most unacknowledged packets an ACK is held for.
const delayedAckPackets = 4

// rnrNAK tells the requester that no receive WQE is posted.
func (q *QP) rnrNAK(rx *receiver, psn uint32) {
	q.count(cRNRNAKsSent, 1)
	q.resp.nakSent = true
	q.sendAETH(rx, psn, wire.RNRSyndrome(q.attr.MinRNRTimer))
}

// respondError answers a request that cannot be executed with a NAK and
// moves the QP to ERR (IBA class C and D1 errors). With recvWQE, the
// receive WQE of the interrupted SEND completes with status.
func (q *QP) respondError(rx *receiver, psn uint32, code wire.NAKCode, status verbs.WCStatus, recvWQE bool) {
	if recvWQE && q.rqHead != q.rqTail {
		w := &q.rq[q.rqHead%uint32(len(q.rq))]
		q.rqHead++
		q.recvCQ.push(&verbs.WC{WRID: w.id, Status: status, Opcode: verbs.WCRecv, QPN: q.qpn})
	}
	q.sendAETH(rx, psn, wire.NAKSyndrome(code))
	q.fail(q.sqHead, verbs.WCWRFlushErr)
}

// sendAETH sends an ACKNOWLEDGE packet with the given syndrome. A pending
// coalesced ACK is superseded.
func (q *QP) sendAETH(rx *receiver, psn uint32, syn wire.Syndrome) {
	q.noteAETHSent(psn)
	q.buildAETH(rx.packet(), psn, syn)
}

// noteAETHSent updates the ACK state for an ACK or NAK of psn going out:
// it covers every packet before psn, and an owed ACK up to psn.
func (q *QP) noteAETHSent(psn uint32) {
	r := &q.resp
	if r.ackPending && psnDiff(psn, r.ackPSN) >= 0 {
		r.ackPending = false
	}
	if !r.ackPending {
		r.ackDue = 0
		r.ackUrgent = false
	}
	r.unacked = 0
}

// buildAETH fills p with an ACKNOWLEDGE packet.
func (q *QP) buildAETH(p *link.Packet, psn uint32, syn wire.Syndrome) {
	b := p.Buf[:wire.BTHLen+wire.AETHLen]
	q.encodeResponseBTH(b, wire.RCAcknowledge, psn, 0)
	wire.AETH(b[wire.BTHLen:]).Encode(syn, q.resp.msn)
	p.N = len(b)
	p.Addr = q.peer
}

// flushOwedAck sends a coalesced ACK that is still owed, from the QP's own
// buffers: when a delayed ACK is due, and at Close, where the receive loop
// may not have reached the end of its batch, and a requester whose last
// message is never acknowledged would retry against a QP that is gone.
func (q *QP) flushOwedAck() {
	r := &q.resp
	if !r.ackPending {
		return
	}
	switch q.attr.State {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	default:
		return
	}
	defer q.transmit()
	if !r.placed.empty() {
		q.buildSelectiveNAK(q.txPacket())
		return
	}
	psn := r.ackPSN
	q.noteAETHSent(psn)
	q.buildAETH(q.txPacket(), psn, wire.ACKSyndrome(31))
}

func (q *QP) encodeResponseBTH(b []byte, op wire.Opcode, psn uint32, pad uint8) {
	wire.BTH(b).Encode(&wire.BTHFields{
		Opcode:   op,
		MigReq:   true,
		PadCount: pad,
		PKey:     wire.DefaultPKey,
		DestQP:   q.attr.DestQPN,
		PSN:      psn,
	})
}
