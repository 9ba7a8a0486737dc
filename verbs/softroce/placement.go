package softroce

import (
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
	if d >= sackWindow {
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
		q.count(cDuplicates, 1)
	case pkt.BTH.Opcode() == wire.RCWriteOnly && q.placeWrite(pkt):
		r.placed.set(psn)
		q.count(cOutOfOrder, 1)
	default:
		q.count(cOutOfSequence, 1) // left for its turn
	}
	r.ackUrgent = true
	q.owe(rx, psnAdd(r.epsn, wire.PSNMask))
}

// placeWrite executes a WRITE ONLY that arrived past a gap, if it is
// valid. An invalid one is left for its turn, where it is answered with
// the NAK it deserves.
func (q *QP) placeWrite(pkt *wire.Packet) bool {
	va, rkey, n := pkt.RETH.VA(), pkt.RETH.RKey(), uint64(pkt.RETH.DMALen())
	if uint64(len(pkt.Payload)) != n || n > uint64(q.mtu) {
		return false
	}
	if n == 0 {
		return true // a zero-length WRITE checks nothing (IBA C9-88)
	}
	return q.dev.remoteWrite(q.pd, q.attr.AccessFlags, rkey, va, pkt.Payload)
}

// takePlaced moves the expected PSN past packets placed ahead of it, now
// that the gap before them is filled, and owes the requester an answer.
func (q *QP) takePlaced(rx *receiver) {
	r := &q.resp
	for r.placed.take(r.epsn) {
		r.epsn = psnAdd(r.epsn, 1)
		r.msn = psnAdd(r.msn, 1) // each was a whole WRITE ONLY message
	}
	r.ackUrgent = true
	q.owe(rx, psnAdd(r.epsn, wire.PSNMask))
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
	n := r.placed.encode(p.Buf[h:h+wire.MaxSACKBytes], r.epsn)
	b := p.Buf[:h+n]
	q.encodeResponseBTH(b, wire.RCSelectiveNAK, r.epsn, 0)
	wire.AETH(b[wire.BTHLen:]).Encode(wire.NAKSyndrome(wire.NAKPSNSeqErr), r.msn)
	p.N = len(b)
	p.Addr = q.peer
}
