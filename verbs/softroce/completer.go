package softroce

import (
	"encoding/binary"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// completerState tracks acknowledgements and retries of the send queue.
type completerState struct {
	ackedPSN  uint32 // the newest PSN acknowledged; ackedPSN+1 is the oldest outstanding
	retryLeft uint8  // retries left after timeouts and sequence NAKs, reset on progress
	rnrLeft   uint8  // RNR retries left, reset on progress; 7 means forever

	// rewound is set after a go-back-N to rewindPSN, so that a burst of
	// evidence for the same loss rewinds only once.
	rewound   bool
	rewindPSN uint32
	rewindAt  int64 // when the last go-back-N rewind happened (monotonic ns)

	win sendWindow   // congestion window
	rtt rttEstimator // round-trip measurements for the ACK timeout
	sb  *scoreboard  // selective repeat's view of the peer; nil for go-back-N
	// sack is the most of a selective NAK's bitmap read, in bytes
	// (widesack.go).
	sack int

	backoff  uint8 // selective repeat: timeouts since the last progress
	rtoArmed int64 // selective repeat: the timeout last armed (ns)
	// rtoFloor is the selective timeout's floor (rtofloor.go). After a
	// timeout, [timeoutPSN, timeoutEnd) are the PSNs it could resend,
	// timeoutAt when it fired (0 once judged), and timeoutResends and
	// timeoutDups the resends of those PSNs since and the duplicates the
	// peer reported of them.
	rtoFloor                    rtoFloor
	timeoutPSN, timeoutEnd      uint32
	timeoutAt                   int64
	timeoutResends, timeoutDups uint64

	// readWait is set after a READ was asked again from readPSN: gaps are
	// ignored until the new response stream starts, since responses to
	// the old request still arrive beyond the gap.
	readWait bool
	readPSN  uint32

	ackDeadline int64 // local ACK timeout (monotonic ns), 0 when not armed
	rnrDeadline int64 // end of the RNR wait, 0 when not waiting
	rnrPSN      uint32
	// rnrWQE is the request the RNR waits were for (its send queue index
	// and first PSN), and rnrWaited their total (ns).
	rnrWQE      uint32
	rnrFirstPSN uint32
	rnrWaited   int64
}

// complete handles a response packet (ACK, NAK, READ response, atomic
// ACK) addressed to this QP. The caller holds q.mu.
func (q *QP) complete(pkt *wire.Packet) {
	switch q.attr.State {
	case verbs.QPSRTS, verbs.QPSSQD:
	default:
		q.count(cUnknownQP, 1)
		return
	}
	// Echoes stand outside the PSN sequence: their PSN only says how far
	// the responder got.
	switch pkt.BTH.Opcode() {
	case wire.RCECNEcho:
		q.onECNEcho(pkt)
		return
	case wire.RCDuplicateEcho:
		q.onDupEcho(pkt)
		return
	case wire.RCHoldEcho:
		q.onHoldEcho(pkt)
		return
	}
	psn := pkt.BTH.PSN()
	// Only a response within the outstanding range is acted on (IBA
	// 9.7.5.1): one for a PSN already acknowledged is stale or forged, and
	// one for a PSN never sent is forged. Either is dropped silently.
	if !q.outstanding(psn) {
		q.count(cUnexpectedResponses, 1)
		return
	}
	if sb := q.comp.sb; sb != nil {
		sb.reportAt(nanotime(), q.comp.rtt.srtt, q.comp.rtt.min)
	}
	op := pkt.BTH.Opcode()
	switch {
	case op == wire.RCAcknowledge:
		q.onAETH(psn, pkt.AETH.Syndrome())
	case op == wire.RCSelectiveNAK:
		q.onSelectiveNAK(psn, pkt)
	case op == wire.RCAtomicAcknowledge:
		q.onAtomicAck(psn, pkt)
	case op.Flags().Has(wire.FlagRead | wire.FlagResponse):
		q.onReadResponse(psn, op, pkt)
	}
	if q.attr.State == verbs.QPSRTS {
		q.repair()
		q.runRequester()
	}
}

// outstanding reports whether psn lies in the range of PSNs sent and not
// yet acknowledged: after ackedPSN, before highPSN.
func (q *QP) outstanding(psn uint32) bool {
	return psnDiff(psn, q.comp.ackedPSN) > 0 && psnDiff(psn, q.req.highPSN) < 0
}

// onAETH handles an ACK or NAK.
func (q *QP) onAETH(psn uint32, syn wire.Syndrome) {
	switch syn.Kind() {
	case wire.SyndromeACK:
		q.ackUpTo(psn)
	case wire.SyndromeRNR:
		if q.req.rnrWait || !q.rnrPoint(psn) {
			// Nothing was sent since the last RNR NAK, or psn is not a
			// packet that needs a receive WQE: no responder sent it.
			q.count(cUnexpectedResponses, 1)
			return
		}
		q.count(cRNRNAKsRecv, 1)
		if q.ackUpTo(psnAdd(psn, wire.PSNMask)) || q.attr.State != verbs.QPSRTS {
			return // the rewind to a lost response sends psn again
		}
		q.onRNR(psn, syn.Value())
	case wire.SyndromeNAK:
		seqErr := wire.NAKCode(syn.Value()) == wire.NAKPSNSeqErr
		if seqErr && q.comp.sb != nil {
			// A selective-repeat responder reports gaps with selective
			// NAKs only: this one is forged.
			q.count(cUnexpectedResponses, 1)
			return
		}
		askedAgain := q.ackUpTo(psnAdd(psn, wire.PSNMask))
		if seqErr {
			q.count(cSeqNAKsRecv, 1)
			if !askedAgain && !q.req.rnrWait && !q.rewindTooSoon() {
				q.goBack(psn)
			}
			return
		}
		status := verbs.WCRemOpErr
		switch wire.NAKCode(syn.Value()) {
		case wire.NAKInvalidRequest:
			status = verbs.WCRemInvReqErr
		case wire.NAKRemoteAccess:
			status = verbs.WCRemAccessErr
		case wire.NAKInvalidRDRequest:
			status = verbs.WCRemInvRDReqErr
		}
		q.fail(q.wqeAt(psn), status)
	default:
		q.count(cMalformed, 1) // a reserved syndrome
	}
}

// wqeAt returns the index of the outstanding request that sent psn, or the
// oldest outstanding request when none did.
func (q *QP) wqeAt(psn uint32) uint32 {
	for i := q.sqHead; i != q.sqTail; i++ {
		w := &q.sq[i%uint32(len(q.sq))]
		if !w.started {
			break
		}
		if w.containsPSN(psn) {
			return i
		}
	}
	return q.sqHead
}

// rnrPoint reports whether a responder could send an RNR NAK for psn: it
// is a packet sent that consumes a receive WQE, the first of a SEND or
// the last of a WRITE with immediate.
func (q *QP) rnrPoint(psn uint32) bool {
	idx := q.wqeAt(psn)
	if idx == q.sqTail {
		return false
	}
	w := &q.sq[idx%uint32(len(q.sq))]
	if !w.containsPSN(psn) {
		return false
	}
	switch w.opcode {
	case verbs.WRSend, verbs.WRSendWithImm:
		return psn == w.firstPSN
	case verbs.WRRDMAWriteWithImm:
		return psn == w.lastPSN()
	}
	return false
}

// rewindTooSoon reports whether a go-back-N rewind happened less than
// half the shortest round trip measured ago. The peer cannot answer a
// rewind's packets sooner, so a sequence NAK that arrives sooner was sent
// before it saw them: it is stale (the rewind resends what it names
// anyway). So NAKs, forged or not, that alternate between PSNs (which the
// PSN check of goBack does not catch) cause at most one resend of the
// window per half round trip.
func (q *QP) rewindTooSoon() bool {
	at := q.comp.rewindAt
	return at != 0 && nanotime()-at < q.comp.rtt.min/2
}

// goBack rewinds to psn unless the same rewind is already under way.
func (q *QP) goBack(psn uint32) {
	if q.comp.rewound && q.comp.rewindPSN == psn {
		return
	}
	if psnDiff(psn, q.req.nextPSN) >= 0 {
		return // nothing sent at or after psn
	}
	q.comp.rewindAt = nanotime()
	q.comp.rewound = true
	q.comp.rewindPSN = psn
	q.comp.win.onLoss(psn, q.req.highPSN)
	q.comp.rtt.discard()
	q.retransmit(psn)
	q.armAckTimerNow()
}

// ackUpTo records that every PSN up to and including psn arrived, and
// retires the requests that are finished. An acknowledgement past a READ
// or atomic whose response is missing covers only the PSNs before that
// response: the responder executed the later requests, so the response
// was lost, and the request is asked again from it (IBA 9.7.5.1.3).
// Acknowledging past it would make the answers to the repeat look stale,
// and the QP would drop them until its retries ran out. ackUpTo reports
// whether it asked again; the caller's own rewind is then redundant.
func (q *QP) ackUpTo(psn uint32) (askedAgain bool) {
	missing, gap := q.missingResponse(psn)
	if gap {
		psn = psnAdd(missing, wire.PSNMask)
	}
	if d := psnDiff(psn, q.comp.ackedPSN); d > 0 && psnDiff(psn, q.req.highPSN) < 0 {
		if sb := q.comp.sb; sb != nil {
			if sb.any {
				// The ACK moved past a gap that was repaired: it says
				// when the repair arrived, not the timed packet, whose
				// own arrival a lost selective NAK left unreported.
				q.comp.rtt.discard()
			} else {
				q.ccSample(psn, nanotime())
			}
			sb.acked(q.comp.ackedPSN, psn)
		}
		q.comp.win.onAck(int(d), psn, q.req.highPSN)
		q.comp.rtt.acked(psn, nanotime())
		q.comp.ackedPSN = psn
		q.progress()
	}
	if gap {
		q.askAgain(missing)
	}
	q.retire()
	return gap
}

// missingResponse returns the first PSN, at or before psn, of a response
// that has not arrived: the next response of a READ, or an atomic's
// acknowledgement. Responses are placed in order, so no request after it
// has any placed.
func (q *QP) missingResponse(psn uint32) (uint32, bool) {
	for i := q.sqHead; i != q.sqTail; i++ {
		w := &q.sq[i%uint32(len(q.sq))]
		if !w.started || psnDiff(w.firstPSN, psn) > 0 {
			break
		}
		if w.isRdAtomic() && !w.done {
			if m := psnAdd(w.firstPSN, w.readPkts); psnDiff(m, psn) <= 0 {
				return m, true
			}
			return 0, false
		}
	}
	return 0, false
}

// askAgain rewinds to psn, a missing READ response or atomic
// acknowledgement. After a READ's, responses beyond the gap, to the
// earlier request, are ignored until the answer to the repeat begins.
func (q *QP) askAgain(psn uint32) {
	if w := &q.sq[q.wqeAt(psn)%uint32(len(q.sq))]; w.opcode == verbs.WRRDMARead {
		q.comp.readWait = true
		q.comp.readPSN = psn
	}
	q.goBack(psn)
}

// progress resets the retry counters and the ACK timer after the peer
// showed it is alive and receiving.
func (q *QP) progress() {
	q.comp.retryLeft = q.attr.RetryCnt
	q.comp.rnrLeft = q.attr.RNRRetry
	q.comp.backoff = 0
	q.comp.rewound = false
	q.armAckTimerNow()
}

// retire completes finished requests in order from the head of the send
// queue.
func (q *QP) retire() {
	for q.sqHead != q.sqNext {
		w := &q.sq[q.sqHead%uint32(len(q.sq))]
		if !w.started {
			return
		}
		if w.isRdAtomic() {
			if !w.done {
				return // ackUpTo never acknowledges past its responses
			}
		} else if psnDiff(w.lastPSN(), q.comp.ackedPSN) > 0 {
			return
		}
		if w.flags&verbs.SendSignaled != 0 {
			wc := verbs.WC{WRID: w.id, Status: verbs.WCSuccess, Opcode: wcOpcode(w.opcode), QPN: q.qpn}
			if w.opcode == verbs.WRRDMARead {
				wc.ByteLen = uint32(w.length)
			}
			q.sendCQ.push(&wc)
		}
		q.sqHead++
	}
	if q.sqHead == q.sqNext && q.inflight() == 0 {
		q.comp.ackDeadline = 0
	}
}

// onReadResponse places one READ response packet.
func (q *QP) onReadResponse(psn uint32, op wire.Opcode, pkt *wire.Packet) {
	idx := q.wqeAt(psn)
	if idx == q.sqTail {
		q.count(cUnexpectedResponses, 1)
		return
	}
	w := &q.sq[idx%uint32(len(q.sq))]
	if w.opcode != verbs.WRRDMARead || !w.containsPSN(psn) || w.done {
		q.count(cUnexpectedResponses, 1) // no READ asked for this PSN
		return
	}
	if pkt.AETH != nil {
		// It acknowledges the PSNs before the READ, up to a missing
		// response of an earlier READ or atomic.
		q.ackUpTo(psnAdd(w.firstPSN, wire.PSNMask))
		if q.attr.State != verbs.QPSRTS {
			return
		}
	}
	if q.comp.readWait && psn == q.comp.readPSN && op.Flags().Has(wire.FlagFirst) {
		q.comp.readWait = false // the answer to the repeated request begins
	}
	want, missing := q.missingResponse(psn)
	if !missing {
		return // placed already: a duplicate
	}
	if psn != want {
		if !q.comp.readWait {
			// An earlier response, of this READ or an earlier READ or
			// atomic, was lost: ask again from it.
			q.askAgain(want)
		}
		return
	}
	if w.readPkts >= w.readReq {
		return // answers a part asked for before a rewind
	}
	off := uint64(w.readPkts) * uint64(q.mtu)
	rem := w.length - min(off, w.length)
	n := uint64(len(pkt.Payload))
	last := w.readPkts+1 == w.npkts
	// A READ asked for in parts, or asked again, is answered in several
	// response sequences, whose FIRST and LAST need not match the WQE's:
	// only the payload sizes must.
	if (last && n != rem) || (!last && n != uint64(q.mtu)) {
		q.fail(idx, verbs.WCBadRespErr)
		return
	}
	if n > 0 && !q.dev.scatter(q.pd, w.sgl, off, pkt.Payload) {
		q.fail(idx, verbs.WCLocProtErr)
		return
	}
	w.readPkts++
	q.comp.win.onAck(1, psn, q.req.highPSN)
	q.comp.ackedPSN = psn
	q.progress()
	if w.readPkts == w.readReq {
		q.req.rdAtomic-- // this part is answered
	}
	if last {
		w.done = true
	}
	q.retire()
}

// onAtomicAck stores an atomic's original value and completes it.
func (q *QP) onAtomicAck(psn uint32, pkt *wire.Packet) {
	idx := q.wqeAt(psn)
	w := &q.sq[idx%uint32(len(q.sq))]
	if idx == q.sqTail || !w.isRdAtomic() || w.opcode == verbs.WRRDMARead || w.firstPSN != psn || w.done {
		q.count(cUnexpectedResponses, 1) // no atomic asked for this PSN
		return
	}
	q.ackUpTo(psnAdd(psn, wire.PSNMask))
	if q.attr.State != verbs.QPSRTS || q.sqHead != idx {
		return // an earlier READ is still unanswered
	}
	var orig [8]byte
	binary.NativeEndian.PutUint64(orig[:], pkt.AtomicAckETH.OrigData())
	if !q.dev.scatter(q.pd, w.sgl, 0, orig[:]) {
		q.fail(idx, verbs.WCLocProtErr)
		return
	}
	w.done = true
	q.req.rdAtomic--
	q.comp.win.onAck(1, psn, q.req.highPSN)
	q.comp.ackedPSN = psn
	q.progress()
	q.retire()
}

// maxRNRWait bounds the time one request waits for receive WQEs over all
// its RNR NAKs, even with rnr_retry 7 (which the IBTA calls infinite): RNR
// NAKs, forged or not, cannot hold a request forever.
var maxRNRWait = int64(60 * time.Second)

// onRNR starts the RNR wait after an RNR NAK for psn, or fails the request
// when its RNR retries, or its total RNR wait, are used up.
func (q *QP) onRNR(psn uint32, timerCode uint8) {
	idx := q.wqeAt(psn)
	w := &q.sq[idx%uint32(len(q.sq))]
	if idx != q.comp.rnrWQE || w.firstPSN != q.comp.rnrFirstPSN {
		q.comp.rnrWQE, q.comp.rnrFirstPSN, q.comp.rnrWaited = idx, w.firstPSN, 0
	}
	wait := rnrTimeout(timerCode)
	if q.comp.rnrLeft == 0 || q.comp.rnrWaited+wait > maxRNRWait {
		q.count(cRNRRetryExceeded, 1)
		q.fail(q.wqeAt(psn), verbs.WCRNRRetryExcErr)
		return
	}
	if q.comp.rnrLeft != 7 {
		q.comp.rnrLeft--
	}
	q.comp.rnrWaited += wait
	q.req.rnrWait = true
	q.comp.rnrPSN = psn
	q.comp.ackDeadline = 0
	q.comp.rnrDeadline = nanotime() + wait
	q.armTimer()
}
