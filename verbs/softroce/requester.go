package softroce

import (
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// requesterState is the transmit side of the send queue.
type requesterState struct {
	nextPSN  uint32 // PSN of the next request packet
	highPSN  uint32 // one past the highest PSN ever sent; below it, sends are retransmissions
	curOff   uint64 // bytes of the WQE at sqNext already segmented
	sinceAck int    // packets since the last AckReq
	rdAtomic int    // READ and atomic requests awaiting their responses
	rnrWait  bool   // paused until the RNR timer fires
}

// inflight is the number of PSNs sent and not yet acknowledged.
func (q *QP) inflight() int {
	return int(psnDiff(q.req.nextPSN, psnAdd(q.comp.ackedPSN, 1)))
}

// pipe is the number of PSNs in flight for the congestion window: those
// sent and not acknowledged, less those known to have arrived past a gap
// (selective repeat).
func (q *QP) pipe() int {
	if sb := q.comp.sb; sb != nil {
		return q.inflight() - sb.sacked
	}
	return q.inflight()
}

// windowFull reports whether the congestion window, or with selective
// repeat the span of PSNs the peer can track, holds back new packets.
func (q *QP) windowFull() bool {
	if q.pipe() >= q.comp.win.cwnd {
		return true
	}
	sb := q.comp.sb
	if sb == nil {
		return false
	}
	if n := q.inflight(); n >= sb.size()-1 && !sb.grow(psnAdd(q.comp.ackedPSN, 1), n) {
		return true
	}
	return q.paced()
}

// runRequester transmits queued requests while the window allows. The
// caller holds q.mu.
func (q *QP) runRequester() {
	if q.attr.State != verbs.QPSRTS || q.req.rnrWait || q.sqNext == q.sqTail {
		return
	}
	defer q.transmit()
	sent := false
	for q.sqNext != q.sqTail {
		idx := q.sqNext
		w := &q.sq[idx%uint32(len(q.sq))]
		if !w.started {
			if !q.startWQE(w) {
				break
			}
		} else if q.req.curOff == 0 && !w.isRdAtomic() {
			q.req.nextPSN = w.firstPSN
		}
		if w.isRdAtomic() && w.done {
			// Finished before a go-back-N rewind reached it.
			q.req.nextPSN = psnAdd(w.lastPSN(), 1)
			q.sqNext++
			continue
		}
		if !q.emitWQE(idx, w) {
			sent = true
			break
		}
		sent = true
		if q.attr.State != verbs.QPSRTS {
			return
		}
	}
	if sent && q.comp.ackDeadline == 0 {
		q.armAckTimer()
	}
}

// startWQE assigns PSNs to a request transmitted for the first time, or
// reports false when the window, fence or read/atomic limit holds it back.
func (q *QP) startWQE(w *sendWQE) bool {
	mtu := uint64(q.mtu)
	switch {
	case w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAdd:
		w.npkts = 1
	case w.length == 0:
		w.npkts = 1
	default:
		w.npkts = uint32((w.length + mtu - 1) / mtu)
	}
	if w.flags&verbs.SendFence != 0 && q.req.rdAtomic > 0 {
		return false
	}
	if w.isRdAtomic() && q.req.rdAtomic >= max(int(q.attr.MaxRdAtomic), 1) {
		return false
	}
	if n := q.pipe(); n > 0 && w.isRdAtomic() && n+int(w.npkts) > q.comp.win.cwnd {
		return false
	}
	if q.windowFull() {
		return false
	}
	w.started = true
	w.firstPSN = q.req.nextPSN
	q.req.curOff = 0
	return true
}

// emitWQE builds the packets of the request at sqNext. It returns true
// when the request is fully transmitted and sqNext moved on, false when the
// window filled first.
func (q *QP) emitWQE(idx uint32, w *sendWQE) bool {
	switch w.opcode {
	case verbs.WRRDMARead:
		return q.emitRead(w)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
		q.req.rdAtomic++
		q.emitAtomic(w)
		q.sqNext++
		return true
	}
	mtu := uint64(q.mtu)
	for {
		if q.windowFull() {
			return false
		}
		off := q.req.curOff
		n := min(w.length-off, mtu)
		last := off+n == w.length
		psn := q.req.nextPSN
		q.req.sinceAck++
		ackReq := last || q.req.sinceAck >= ackReqPeriod || q.pipe()+1 >= q.comp.win.cwnd
		if ackReq {
			q.req.sinceAck = 0
		}
		if !q.buildData(q.txPacket(), w, psn, off, ackReq) {
			q.txN--
			q.fail(idx, verbs.WCLocProtErr)
			return false
		}
		q.notePSNSent(psn)
		q.req.nextPSN = psnAdd(psn, 1)
		q.req.curOff = off + n
		if last {
			q.req.curOff = 0
			q.sqNext++
			return true
		}
	}
}

// buildData fills p with the packet of a SEND or RDMA WRITE request w
// that carries its bytes from off (at most one MTU) as PSN psn. It
// reports false if the request's local memory cannot be read.
//
// With selective repeat every WRITE packet can be placed on its own: each
// goes as an RDMA WRITE ONLY whose RETH names its own part, and the last
// packet of a WRITE with immediate as a WRITE ONLY with immediate whose
// RETH names the whole message, its payload being the message's tail, so
// that the receive completion reports the whole length.
func (q *QP) buildData(p *link.Packet, w *sendWQE, psn uint32, off uint64, ackReq bool) bool {
	n := min(w.length-off, uint64(q.mtu))
	first, last := off == 0, off+n == w.length
	op := dataOpcode(w.opcode, first, last)
	raddr, dmaLen := w.raddr, w.length
	if q.comp.sb != nil && op.Flags().Has(wire.FlagWrite) && !(first && last) {
		op = wire.RCWriteOnly
		raddr, dmaLen = w.raddr+off, n
		if last && w.opcode == verbs.WRRDMAWriteWithImm {
			op = wire.RCWriteOnlyImm
			raddr, dmaLen = w.raddr, w.length
		}
	}
	fl := op.Flags()
	hlen := op.HeaderLen()
	pad := wire.PadFor(int(n))
	total := hlen + int(n) + pad
	b := p.Buf[:total]
	wire.BTH(b).Encode(&wire.BTHFields{
		Opcode:    op,
		Solicited: last && w.flags&verbs.SendSolicited != 0,
		MigReq:    true,
		PadCount:  uint8(pad),
		PKey:      wire.DefaultPKey,
		DestQP:    q.attr.DestQPN,
		AckReq:    ackReq,
		PSN:       psn,
	})
	h := wire.BTHLen
	if fl.Has(wire.FlagRETH) {
		wire.RETH(b[h:]).Encode(raddr, w.rkey, uint32(dmaLen))
		h += wire.RETHLen
	}
	if fl.Has(wire.FlagImm) {
		wire.ImmDt(b[h:]).Set(w.imm)
		h += wire.ImmDtLen
	}
	p.Addr = q.peer
	p.ECN = q.requestECN()
	if q.dev.tailSend && pad == 0 && n > 0 && w.flags&verbs.SendInline == 0 {
		// The link reads the payload from the registered memory itself.
		if mem, m := q.dev.span(q.pd, w.sgl, off, n); m != nil {
			p.N = h
			p.Tail = mem
			q.txb.hold(q.txN-1, m) // p is q.txPacket()'s
			return true
		}
	}
	payload := b[h : h+int(n)]
	if w.flags&verbs.SendInline != 0 {
		copy(payload, w.inline[off:off+n])
	} else if !q.dev.gather(q.pd, w.sgl, off, payload) {
		return false
	}
	clear(b[h+int(n):])
	p.N = total
	return true
}

// lastPartLen is the payload of the last packet of an n-byte message
// (n > 0) segmented at mtu.
func lastPartLen(n, mtu uint64) uint64 { return n - (n-1)/mtu*mtu }

// emitRead asks for the next part of a READ. A READ larger than the send
// window is asked for in window-sized parts, one at a time, so that a lost
// response costs at most a window of responses sent again. It returns true
// when the last part is asked for.
func (q *QP) emitRead(w *sendWQE) bool {
	if w.readReq > w.readPkts || q.req.rdAtomic >= max(int(q.attr.MaxRdAtomic), 1) {
		return false // a part is outstanding, or the peer's limit is reached
	}
	n := min(w.npkts-w.readReq, uint32(max(q.comp.win.cwnd-q.pipe(), 1)))
	if w.readReq < w.readHigh {
		// Asking again: the responder may have executed the earlier
		// request, so the repeat must end where it ended (IBA 9.7.5.1.4).
		n = w.readHigh - w.readReq
	}
	off := uint64(w.readReq) * uint64(q.mtu)
	psn := psnAdd(w.firstPSN, w.readReq)
	length := min(uint64(n)*uint64(q.mtu), w.length-min(off, w.length))
	p := q.txPacket()
	b := p.Buf[:wire.BTHLen+wire.RETHLen]
	wire.BTH(b).Encode(&wire.BTHFields{
		Opcode: wire.RCReadRequest, MigReq: true, PKey: wire.DefaultPKey,
		DestQP: q.attr.DestQPN, AckReq: true, PSN: psn,
	})
	wire.RETH(b[wire.BTHLen:]).Encode(w.raddr+off, w.rkey, uint32(length))
	p.N = len(b)
	p.Addr = q.peer
	p.ECN = q.requestECN()
	q.notePSNSent(psn)
	w.readAsked = w.readReq
	w.readReq += n
	w.readHigh = max(w.readHigh, w.readReq)
	q.req.rdAtomic++
	end := psnAdd(w.firstPSN, w.readReq)
	// The request consumes a PSN for each response packet.
	if psnDiff(end, q.req.highPSN) > 0 {
		q.req.highPSN = end
	}
	q.req.nextPSN = end
	q.req.sinceAck = 0
	if w.readReq < w.npkts {
		return false
	}
	q.sqNext++
	return true
}

// emitAtomic sends a CMP_AND_SWP or FETCH_AND_ADD request.
func (q *QP) emitAtomic(w *sendWQE) {
	op := wire.RCFetchAdd
	if w.opcode == verbs.WRAtomicCmpAndSwp {
		op = wire.RCCompareSwap
	}
	p := q.txPacket()
	b := p.Buf[:wire.BTHLen+wire.AtomicETHLen]
	wire.BTH(b).Encode(&wire.BTHFields{
		Opcode: op, MigReq: true, PKey: wire.DefaultPKey,
		DestQP: q.attr.DestQPN, AckReq: true, PSN: w.firstPSN,
	})
	wire.AtomicETH(b[wire.BTHLen:]).Encode(w.raddr, w.rkey, w.swapOrAdd(), w.compareAdd)
	p.N = len(b)
	p.Addr = q.peer
	p.ECN = q.requestECN()
	q.notePSNSent(w.firstPSN)
	q.req.nextPSN = psnAdd(w.firstPSN, 1)
	q.req.sinceAck = 0
}

// swapOrAdd is the AtomicETH Swap/Add field: the swap value of
// CMP_AND_SWP, the addend of FETCH_AND_ADD.
func (w *sendWQE) swapOrAdd() uint64 {
	if w.opcode == verbs.WRAtomicCmpAndSwp {
		return w.swap
	}
	return w.compareAdd
}

// notePSNSent counts retransmissions and advances highPSN.
func (q *QP) notePSNSent(psn uint32) {
	now := nanotime()
	again := psnDiff(psn, q.req.highPSN) < 0
	q.ccSent(now)
	if sb := q.comp.sb; sb != nil {
		sb.sent(psn, now, again)
	}
	if again {
		q.count(cRetransmits, 1)
		q.noteResent()
		if c := &q.comp; c.timeoutAt != 0 && c.inTimeoutSpan(psn) {
			c.timeoutResends++
		}
		if r := &q.comp.rtt; r.timing && r.psn == psn {
			r.discard() // Karn: no sample from a packet sent twice
		}
		return
	}
	q.req.highPSN = psnAdd(psn, 1)
	q.comp.rtt.sent(psn, now)
}

// dataOpcode picks the opcode of one packet of a SEND or RDMA WRITE.
func dataOpcode(op verbs.WROpcode, first, last bool) wire.Opcode {
	imm := op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm
	if op == verbs.WRSend || op == verbs.WRSendWithImm {
		switch {
		case first && last && imm:
			return wire.RCSendOnlyImm
		case first && last:
			return wire.RCSendOnly
		case first:
			return wire.RCSendFirst
		case last && imm:
			return wire.RCSendLastImm
		case last:
			return wire.RCSendLast
		}
		return wire.RCSendMiddle
	}
	switch {
	case first && last && imm:
		return wire.RCWriteOnlyImm
	case first && last:
		return wire.RCWriteOnly
	case first:
		return wire.RCWriteFirst
	case last && imm:
		return wire.RCWriteLastImm
	case last:
		return wire.RCWriteLast
	}
	return wire.RCWriteMiddle
}

// txPacket returns the next free request packet buffer; a full batch is
// queued for transmit and a new one borrowed.
func (q *QP) txPacket() *link.Packet {
	if q.txb != nil && q.txN == len(q.tx) {
		q.queueTx()
	}
	q.borrowTx()
	p := &q.tx[q.txN]
	q.txb.hold(q.txN, nil)
	p.Tail = nil
	p.ECN = link.ECNNotECT
	q.txN++
	return p
}

// retransmit rewinds the requester to psn (go-back-N). Requests after it
// are sent again with the same PSNs.
func (q *QP) retransmit(psn uint32) {
	for i := q.sqHead; i != q.sqTail; i++ {
		w := &q.sq[i%uint32(len(q.sq))]
		if !w.started {
			break
		}
		if !w.containsPSN(psn) {
			continue
		}
		q.sqNext = i
		q.req.nextPSN = psn
		q.req.curOff = 0
		switch {
		case w.opcode == verbs.WRRDMARead:
			w.readPkts = min(w.readPkts, uint32(psnDiff(psn, w.firstPSN)))
		case !w.isRdAtomic():
			q.req.curOff = uint64(psnDiff(psn, w.firstPSN)) * uint64(q.mtu)
		}
		// Requests from i on are asked again; only those before stay
		// outstanding.
		q.req.rdAtomic = 0
		for k := q.sqHead; k != q.sqTail; k++ {
			x := &q.sq[k%uint32(len(q.sq))]
			if k-q.sqHead >= i-q.sqHead {
				if x.opcode == verbs.WRRDMARead {
					x.readReq = x.readPkts
				}
				continue
			}
			if x.isRdAtomic() && !x.done && (x.opcode != verbs.WRRDMARead || x.readReq > x.readPkts) {
				q.req.rdAtomic++
			}
		}
		return
	}
}
