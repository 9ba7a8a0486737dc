package softroce

import "github.com/rsock-go/rsock/verbs/softroce/wire"

// Duplicate echoes between rsock peers (negotiated, on top of congestion
// control), rsock's DSACK (RFC 2883): the responder counts the request
// packets that reach it a second time and echoes the count
// (wire.DupEcho), and the requester learns from it that resends it took
// for losses were not: the path reordered, or a report came late. The
// scoreboard then raises its reordering thresholds (selective.go), and
// the congestion controller restores a window that only spurious resends
// cut (congestion_undo.go). Without it the requester can tell a spurious
// resend only by timing, which fails when round trips vary more than
// they last: a host whose CPUs are saturated delays packets by
// milliseconds and reorders them by as much.

// maxDupDelta bounds the duplicates one echo may report; an echo that
// reports more (a reordered echo, whose count is behind, wraps to a huge
// delta) is ignored.
const maxDupDelta = 1 << 20

// dupState is the QP's duplicate echo bookkeeping.
type dupState struct {
	// Responder: duplicate request packets received, modulo 2^32 (what
	// echoes carry), the count last echoed, and the newest one's PSN.
	count, echoed, newest uint32
	// Requester: the peer's count as of the last echo acted on, and the
	// resends not yet reported as duplicates (an echo reporting more is
	// believed only up to them).
	peer      uint32
	unclaimed uint64
}

// SetDuplicateEcho turns duplicate echoes on or off for the QP: its
// responder echoes the count of duplicate requests it receives, and its
// requester learns from the peer's echoes which of its resends were
// spurious. It applies only with congestion control
// (SetCongestionControl), between rsock peers that both asked for it
// (rsock negotiates it in its handshake). It may be called in RESET,
// INIT or RTR.
func (q *QP) SetDuplicateEcho(on bool) error {
	return q.setOption(&q.dupEcho, on)
}

// noteDuplicate counts a request packet with PSN psn that arrived a
// second time, and with duplicate echoes on has an echo sent at the end
// of the batch. The caller holds q.mu.
func (q *QP) noteDuplicate(psn uint32, rx *receiver) {
	q.count(cDuplicates, 1)
	if !q.dupEcho {
		return
	}
	d := &q.dupCounts
	d.count++
	d.newest = psn
	q.queueOwed(rx)
}

// sendDupEcho sends a duplicate echo if duplicates arrived since the last
// one. The caller holds q.mu and reserved a response.
func (q *QP) sendDupEcho(rx *receiver) {
	d := &q.dupCounts
	if !q.dupEcho || d.count == d.echoed {
		return
	}
	d.echoed = d.count
	wire.DupEcho(q.echo(rx, wire.RCDuplicateEcho, wire.DupEchoLen)).Encode(d.count, d.newest)
	q.count(cDupEchoesSent, 1)
}

// noteResent counts a packet sent again, which a duplicate echo may later
// report. The caller holds q.mu.
func (q *QP) noteResent() {
	if q.dupEcho {
		q.dupCounts.unclaimed++
	}
}

// onDupEcho hands the duplicates an echo reports that the last one did
// not to the scoreboard and the congestion controller: as many of the
// QP's resends were spurious, among them the newest duplicate's. An echo
// toward a QP without duplicate echoes, or one whose count is behind
// (reordered) or implausibly far ahead, is dropped; one that reports more
// duplicates than the QP has resends unreported is believed only up to
// those, so that a forged echo cannot undo more than the resends did.
// The caller holds q.mu.
func (q *QP) onDupEcho(pkt *wire.Packet) {
	sb := q.comp.sb
	if !q.dupEcho || q.comp.win.cc == nil || sb == nil {
		q.count(cUnexpectedResponses, 1)
		return
	}
	q.count(cDupEchoesRecv, 1)
	d := &q.dupCounts
	n := pkt.DupEcho.Count()
	delta := n - d.peer
	if delta == 0 || delta > maxDupDelta {
		return
	}
	d.peer = n
	credit := min(uint64(delta), d.unclaimed)
	if credit == 0 {
		return
	}
	d.unclaimed -= credit
	psn := pkt.DupEcho.PSN()
	if psnDiff(psn, q.req.highPSN) >= 0 || psnDiff(q.req.highPSN, psn) > int32(sb.size()) {
		// Not a PSN the scoreboard holds: never sent, or long acknowledged.
		return
	}
	sb.reportAt(nanotime(), q.comp.rtt.srtt, q.comp.rtt.min)
	at := sb.spuriousResend(psn)
	if at == 0 {
		return
	}
	if c := &q.comp; c.timeoutAt != 0 && at >= c.timeoutAt && c.inTimeoutSpan(psn) {
		// Every resend since the last timeout arrived twice: nothing it
		// took for lost was lost; the acknowledgements were late. (With
		// one real loss among them, as under heavy random loss, the
		// floor stays: a higher one would only slow its recovery.)
		if c.timeoutDups += credit; c.timeoutDups >= c.timeoutResends {
			c.timeoutAt = 0
			c.rtoFloor.spurious(nanotime())
			q.count(cSpuriousTimeouts, 1)
		}
	}
	if q.comp.win.onSpuriousResends(int(credit), at) {
		q.count(cCongestionUndos, 1)
		q.runRequester()
	}
}
