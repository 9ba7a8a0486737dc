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

	// res remembers the last max_dest_rd_atomic atomic requests, to
	// answer their duplicates.
	res     []rdAtomicRes
	resNext int
}

// rdAtomicRes is an atomic request the responder executed, kept to answer
// a repeated request without executing it twice.
type rdAtomicRes struct {
	valid bool
	psn   uint32
	orig  uint64 // the value returned
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
		q.count(cDuplicates, 1)
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
	if !r.placed.empty() {
		// A READ consumes several PSNs at once; a peer that placed
		// requests inside them broke the rules, and they are forgotten.
		for i := uint32(1); psnDiff(r.epsn, psnAdd(before, i)) > 0 && i < sackWindow; i++ {
			r.placed.take(psnAdd(before, i))
		}
		q.takePlaced(rx)
	}
	r.nakSent = false
	if fl.Has(wire.FlagRead) || fl.Has(wire.FlagAtomic) {
		r.unacked = 0 // answered already
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

// recvRead executes an RDMA READ request and sends its responses.
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
	q.sendReadResponses(rx, psn, va, rkey, n)
	return true
}

// sendReadResponses sends the response packets of a READ of n bytes at va.
func (q *QP) sendReadResponses(rx *receiver, psn uint32, va uint64, rkey uint32, n uint64) {
	mtu := uint64(q.mtu)
	npkts := max((n+mtu-1)/mtu, 1)
	for i := uint64(0); i < npkts; i++ {
		off := i * mtu
		size := min(n-off, mtu)
		var op wire.Opcode
		switch {
		case npkts == 1:
			op = wire.RCReadResponseOnly
		case i == 0:
			op = wire.RCReadResponseFirst
		case i == npkts-1:
			op = wire.RCReadResponseLast
		default:
			op = wire.RCReadResponseMiddle
		}
		p := rx.packet()
		hlen := op.HeaderLen()
		pad := wire.PadFor(int(size))
		b := p.Buf[:hlen+int(size)+pad]
		q.encodeResponseBTH(b, op, psnAdd(psn, uint32(i)), uint8(pad))
		if op.Flags().Has(wire.FlagAETH) {
			wire.AETH(b[wire.BTHLen:]).Encode(wire.ACKSyndrome(31), q.resp.msn)
		}
		if size > 0 && !q.dev.remoteRead(q.pd, q.attr.AccessFlags, rkey, va+off, b[hlen:hlen+int(size)]) {
			// The MR went away under the READ.
			rx.unget()
			q.count(cAccessErrors, 1)
			q.respondError(rx, psnAdd(psn, uint32(i)), wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
			return
		}
		clear(b[hlen+int(size):])
		p.N = len(b)
		p.Addr = q.peer
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
	r.remember(rdAtomicRes{psn: psn, orig: orig})
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
// WRITEs are acknowledged again, READs are executed again from the
// duplicate's own RETH, and atomics are answered from the saved result.
func (q *QP) duplicate(pkt *wire.Packet, rx *receiver) {
	r := &q.resp
	psn := pkt.BTH.PSN()
	fl := pkt.BTH.Opcode().Flags()
	if !fl.Has(wire.FlagRead) && !fl.Has(wire.FlagAtomic) {
		r.ackUrgent = true // the requester is retrying: stop it quickly
		q.owe(rx, psnAdd(r.epsn, wire.PSNMask))
		return
	}
	if fl.Has(wire.FlagRead) {
		// READ is idempotent: answer a repeated one from its own RETH,
		// checked like a new one, if it ends before the expected PSN.
		va, rkey, n := pkt.RETH.VA(), pkt.RETH.RKey(), uint64(pkt.RETH.DMALen())
		npkts := max((n+uint64(q.mtu)-1)/uint64(q.mtu), 1)
		if n > 1<<31 || uint64(psnDiff(r.epsn, psn)) < npkts {
			return
		}
		if q.dev.remoteCheck(q.pd, q.attr.AccessFlags, rkey, va, n, verbs.AccessRemoteRead) {
			q.sendReadResponses(rx, psn, va, rkey, n)
		}
		return
	}
	for i := range r.res {
		if x := &r.res[i]; x.valid && x.psn == psn {
			q.sendAtomicAck(rx, psn, x.orig)
			return
		}
	}
}

// owe schedules a coalesced ACK of psn, sent when the receiver finishes
// its batch.
func (q *QP) owe(rx *receiver, psn uint32) {
	r := &q.resp
	if !r.ackPending || psnDiff(psn, r.ackPSN) > 0 {
		r.ackPSN = psn
	}
	r.ackPending = true
	if !r.ackQueued {
		r.ackQueued = true
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
