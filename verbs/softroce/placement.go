package softroce

import (
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Out-of-order placement by the responder (selective repeat only). A
// request packet that arrives past a gap is placed at once if it can be
// placed on its own, an RDMA WRITE ONLY without immediate, and its PSN
// recorded; every other request waits to be sent again in its turn, so
// that completions, receive WQEs, READs and atomics keep the order of
// PSNs (a WRITE with immediate completes only after every earlier PSN was
// placed). While a gap is open, each batch that brings packets for the QP
// is answered with one selective NAK.

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
	case pkt.BTH.Opcode() == wire.RCWriteOnly:
		switch q.placeWrite(pkt) {
		case placed:
			r.placed.set(psn)
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

// placeWrite executes a WRITE ONLY that arrived past a gap, if it proves
// itself: a payload, an rkey this QP may use and an address inside its
// region. A zero-length WRITE carries no key that is checked (IBA C9-88),
// so nothing shows that the requester sent it: placed early, it would
// take the PSN of the packet the requester did send there, which would
// then be dropped as a duplicate. It is left for its turn, as is any
// WRITE ONLY that is malformed (answered there with the NAK it deserves).
func (q *QP) placeWrite(pkt *wire.Packet) placement {
	va, rkey, n := pkt.RETH.VA(), pkt.RETH.RKey(), uint64(pkt.RETH.DMALen())
	if n == 0 || uint64(len(pkt.Payload)) != n || n > uint64(q.mtu) {
		return placeLater
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
func (q *QP) takePlaced(rx *receiver) bool {
	r := &q.resp
	if r.placed.has(r.epsn) && (r.inSend || r.inWrite) {
		q.respondError(rx, r.epsn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr, r.inSend)
		return false
	}
	for r.placed.take(r.epsn) {
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
