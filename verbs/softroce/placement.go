package softroce

import (
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Out-of-order placement by the responder (selective repeat only). A
// request packet that arrives past a gap is placed at once if it can be
// placed on its own, an RDMA WRITE ONLY, with or without immediate, and
// its PSN recorded; every other request waits to be sent again in its
// turn, so that receive WQEs, READs and atomics keep the order of PSNs.
// A WRITE ONLY with immediate (with selective repeat, the last packet of
// every WRITE with immediate) is written at once, and its receive
// completion waits until every earlier PSN was placed (takePlaced); if no
// receive WQE is posted then, the placement is forgotten and the
// requester's resend meets the RNR NAK in its turn. Left for its turn
// instead, it was resent again and again while gaps kept opening ahead of
// it: with a 2048-packet window at 1% loss the receiver left 82,000
// packets for their turn in 10 s. While a gap is open, each batch that
// brings packets for the QP is answered with one selective NAK.

// placeAhead handles a request packet d PSNs past the expected one.
func (q *QP) placeAhead(pkt *wire.Packet, rx *receiver, d int32) {
	r := &q.resp
	psn := pkt.BTH.PSN()
	if r.placed.window() == 0 {
		r.placed.init(8 * q.sackBytes())
	}
	if d >= int32(r.placed.window()) {
		// Beyond what a selective NAK can describe: the requester never
		// sends so far ahead.
		q.count(cOutOfSequence, 1)
		return
	}
	if !r.newestSet || psnDiff(psn, r.newest) > 0 {
		r.newest, r.newestSet = psn, true
	}
	switch {
	case r.placed.has(psn):
		q.noteDuplicate(psn, rx)
	case pkt.BTH.Opcode() == wire.RCWriteOnly || pkt.BTH.Opcode() == wire.RCWriteOnlyImm:
		switch q.placeWrite(pkt) {
		case placed:
			r.placed.set(psn)
			if pkt.BTH.Opcode() == wire.RCWriteOnlyImm {
				if r.immAhead == nil {
					r.immAhead = make(map[uint32]immPlaced)
				}
				r.immAhead[psn] = immPlaced{imm: pkt.Imm.Imm(), length: pkt.RETH.DMALen()}
			}
			r.noteSeen(pkt)
			q.count(cOutOfOrder, 1)
		case placeDenied:
			// An rkey this QP may not use, or an address outside its
			// region: the sender fails, as it would in its turn, and
			// learns nothing from a bitmap. The NAK names the expected
			// PSN, so that nothing unreceived counts as acknowledged.
			q.count(cAccessErrors, 1)
			q.respondError(rx, r.epsn, wire.NAKRemoteAccess, verbs.WCRemAccessErr, false)
			return
		default:
			q.count(cOutOfSequence, 1) // left for its turn
		}
	default:
		q.count(cOutOfSequence, 1) // left for its turn
	}
	r.ackUrgent = true
	q.owe(rx, psnAdd(r.epsn, wire.PSNMask))
}

// placement is what became of a WRITE ONLY past a gap.
type placement int

const (
	placeLater  placement = iota // left for its turn
	placed                       // in memory, its PSN recorded
	placeDenied                  // a remote access error
)

// immPlaced is a WRITE ONLY with immediate placed past a gap, whose
// receive completion waits for its turn.
type immPlaced struct {
	imm    uint32
	length uint32 // the whole message's, for the completion
}

// placeWrite executes a WRITE ONLY that arrived past a gap, if it proves
// itself: a payload, an rkey this QP may use and an address inside its
// region. A zero-length WRITE carries no key that is checked (IBA C9-88),
// so nothing shows that the requester sent it: placed early, it would
// take the PSN of the packet the requester did send there, which would
// then be dropped as a duplicate. It is left for its turn, as is any
// WRITE ONLY that is malformed (answered there with the NAK it deserves).
// A WRITE ONLY with immediate names the whole message and carries its
// tail (buildData); the tail is written, and the immediate kept for the
// completion.
func (q *QP) placeWrite(pkt *wire.Packet) placement {
	va, rkey, n := pkt.RETH.VA(), pkt.RETH.RKey(), uint64(pkt.RETH.DMALen())
	m := uint64(len(pkt.Payload))
	imm := pkt.BTH.Opcode() == wire.RCWriteOnlyImm
	switch {
	case n == 0 || m == 0 || m > uint64(q.mtu):
		return placeLater
	case imm && (n > 1<<31 || m != lastPartLen(n, uint64(q.mtu))):
		return placeLater
	case !imm && m != n:
		return placeLater
	}
	if imm {
		if !q.dev.remoteCheck(q.pd, q.attr.AccessFlags, rkey, va, n, verbs.AccessRemoteWrite) {
			return placeDenied
		}
		va += n - m
	}
	if !q.dev.remoteWrite(q.pd, q.attr.AccessFlags, rkey, va, pkt.Payload) {
		return placeDenied
	}
	return placed
}

// takePlaced moves the expected PSN past packets placed ahead of it, now
// that the gap before them is filled, and owes the requester an answer.
// Each placed packet was a whole WRITE ONLY message, so the packet before
// it must have ended a message: if a SEND or WRITE is still in progress,
// the placed packet was not the one the requester sent at its PSN, and the
// QP fails (reported false) rather than drop the real one as a duplicate.
// A placed WRITE with immediate takes the head receive WQE; its
// completion is queued in aheadWCs, for respond to push after the
// completion of the packet that filled the gap. With no receive WQE the
// placement is forgotten, and the requester's resend meets the RNR NAK.
func (q *QP) takePlaced(rx *receiver) bool {
	r := &q.resp
	if r.placed.has(r.epsn) && (r.inSend || r.inWrite) {
		q.respondError(rx, r.epsn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, r.inSend)
		return false
	}
	for r.placed.has(r.epsn) {
		if x, ok := r.immAhead[r.epsn]; ok {
			delete(r.immAhead, r.epsn)
			if q.rqHead == q.rqTail {
				r.placed.take(r.epsn)
				break
			}
			w := &q.rq[q.rqHead%uint32(len(q.rq))]
			q.rqHead++
			r.aheadWCs = append(r.aheadWCs, verbs.WC{WRID: w.id, Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm,
				Flags: verbs.WCWithImm, Imm: x.imm, ByteLen: x.length, QPN: q.qpn})
		}
		r.placed.take(r.epsn)
		r.epsn = psnAdd(r.epsn, 1)
		r.msn = psnAdd(r.msn, 1) // each was a whole WRITE ONLY message
	}
	r.ackUrgent = true
	q.owe(rx, psnAdd(r.epsn, wire.PSNMask))
	return true
}

// buildSelectiveNAK fills p with a selective NAK: the expected PSN, the
// newest PSN that arrived, and the bitmap of the PSNs placed after the
// expected one.
func (q *QP) buildSelectiveNAK(p *link.Packet) {
	r := &q.resp
	q.count(cSeqNAKsSent, 1)
	q.noteAETHSent(r.epsn)
	h := wire.BTHLen + wire.AETHLen
	newest := r.newest
	if !r.newestSet || psnDiff(newest, r.epsn) < 0 {
		newest = psnAdd(r.epsn, wire.PSNMask)
	}
	wire.SACKInfo(p.Buf[h:]).SetNewest(newest)
	h += wire.SACKHeaderLen
	n := r.placed.encode(p.Buf[h:h+r.placed.window()/8], r.epsn)
	b := p.Buf[:h+n]
	q.encodeResponseBTH(b, wire.RCSelectiveNAK, r.epsn, 0)
	wire.AETH(b[wire.BTHLen:]).Encode(wire.NAKSyndrome(wire.NAKPSNSeqErr), r.msn)
	p.N = len(b)
	p.Addr = q.peer
}
