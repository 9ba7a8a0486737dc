package softroce

import (
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Selective loss recovery of the requester (selective repeat only): what
// the scoreboard says is lost is sent again, PSN by PSN, in bounded
// bursts. Go-back-N remains for READ and atomic requests, whose responses
// the completer tracks in order.

// repairBurst bounds the packets resent for one piece of loss evidence (a
// selective NAK, an ACK, a timeout), so that a burst of losses is not
// answered with a burst that overflows the same queue again. Later
// evidence resends the rest. With congestion control, resends also wait
// for the pacer: evidence comes with every packet that arrives, and
// answering each with a burst, whatever the window, resent a 100 Mbit/s
// link's overflow over and over (6,796 resends within 0.5 s of a flow's
// start, with a window of 16).
const repairBurst = 32

// SetSelectiveRepeat turns selective repeat on or off for the QP: the
// peer places packets that arrive past a gap and answers with selective
// NAKs, and the QP resends only what is missing. Both ends must agree
// (rsock negotiates it in its handshake); toward other RoCE peers (rxe,
// RNICs) the IBTA's go-back-N applies. It may be called in RESET, INIT or
// RTR.
func (q *QP) SetSelectiveRepeat(on bool) error {
	return q.setOption(&q.selective, on)
}

// repair resends the packets the scoreboard reports lost, up to
// repairBurst, and transmits them. The caller holds q.mu.
func (q *QP) repair() {
	sb := q.comp.sb
	if sb == nil || q.attr.State != verbs.QPSRTS || q.req.rnrWait || q.inflight() == 0 {
		return
	}
	acked := q.comp.ackedPSN
	if !sb.any && !sb.lost(psnAdd(acked, 1)) {
		return // no gap known, and the oldest PSN is not overdue
	}
	budget := repairBurst
sq:
	for i := q.sqHead; i != q.sqTail && budget > 0; i++ {
		w := &q.sq[i%uint32(len(q.sq))]
		if !w.started {
			break
		}
		if w.isRdAtomic() {
			if w.done {
				continue
			}
			// A READ or atomic request the scoreboard calls lost: ask
			// again, and everything after it (go-back-N). Only the
			// request's own PSN was sent; once a response to it arrived,
			// the rest are found missing by their gap (onReadResponse)
			// or the timer.
			req := psnAdd(w.firstPSN, w.readPkts)
			unanswered := w.opcode != verbs.WRRDMARead || w.readPkts == w.readAsked
			if unanswered && psnDiff(req, acked) > 0 && psnDiff(req, q.req.nextPSN) < 0 && sb.lost(req) {
				q.goBack(req)
				return
			}
			continue
		}
		for k := uint32(0); k < w.npkts && budget > 0; k++ {
			psn := psnAdd(w.firstPSN, k)
			if psnDiff(psn, acked) <= 0 {
				continue
			}
			if psnDiff(psn, q.req.nextPSN) >= 0 {
				break
			}
			if sb.lost(psn) {
				if q.paced() {
					// Resends wait for the pacer as new packets do; its
					// wake-up repairs on (onPaceTimer).
					break sq
				}
				q.resend(i, w, psn)
				budget--
			}
		}
	}
	if budget < repairBurst {
		sb.lossRecovery()
		q.armAckTimer()
		q.transmit()
	}
}

// resend builds PSN psn of data request w (at index idx) again.
func (q *QP) resend(idx uint32, w *sendWQE, psn uint32) {
	off := uint64(psnDiff(psn, w.firstPSN)) * uint64(q.mtu)
	if !q.buildData(q.txPacket(), w, psn, off, true) {
		q.txN--
		q.fail(idx, verbs.WCLocProtErr)
		return
	}
	q.notePSNSent(psn)
	q.comp.win.onResent(1)
}

// onSelectiveNAK handles a selective NAK: psn is the first PSN the
// responder misses, and the SACK bitmap names what arrived after it.
func (q *QP) onSelectiveNAK(psn uint32, pkt *wire.Packet) {
	sb := q.comp.sb
	if sb == nil {
		q.count(cMalformed, 1) // never asked for
		return
	}
	q.count(cSeqNAKsRecv, 1)
	if q.ackUpTo(psnAdd(psn, wire.PSNMask)) || q.attr.State != verbs.QPSRTS {
		return // rewound to a lost READ response or atomic acknowledgement
	}
	now := nanotime()
	info := wire.SACKInfo(pkt.Payload)
	if newest, ok := info.Newest(); ok && psnDiff(newest, q.comp.ackedPSN) > 0 && psnDiff(newest, q.req.nextPSN) < 0 {
		sb.arrived(newest)
	}
	s := info.Bitmap()
	n := s.BitsWithin(q.comp.sack)
	for i := s.NextSet(0, n); i >= 0; i = s.NextSet(i+1, n) {
		p := psnAdd(psn, uint32(i+1))
		if psnDiff(p, q.req.nextPSN) >= 0 {
			break
		}
		if psnDiff(p, q.comp.ackedPSN) > 0 && !sb.isSacked(p) {
			sb.sack(p)
			q.comp.rtt.arrived(p, now)
			q.ccSample(p, now)
		}
	}
	q.comp.win.onLoss(psn, q.req.highPSN)
}
