package softroce

import (
	"fmt"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// The QP's hooks into the congestion controller (congestion.go) and its
// pacer: round-trip samples from the scoreboard, pacing in the requester,
// and the pacing wake-up on the QP's timer.

// SetCongestionControl turns the congestion controller and pacing on or
// off for the QP. It applies only with selective repeat, between rsock
// peers that both asked for it (rsock negotiates it in its handshake);
// toward other RoCE peers (rxe, RNICs) the IBTA's behaviour applies. It
// may be called in RESET, INIT or RTR.
func (q *QP) SetCongestionControl(on bool) error {
	return q.setOption(&q.congestion, on)
}

// SetPathRTT tells the congestion controller the least round trip
// measured on the QP's path by other means (rsock passes the handshake TCP
// connection's): the least round trip the controller samples is taken as
// no more than d, so that a queue another flow holds from the start counts
// as a queue. 0 forgets it. It may be called in RESET, INIT or RTR.
func (q *QP) SetPathRTT(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("softroce: path RTT %v: %w", d, verbs.ErrInvalidArgument)
	}
	return setBeforeRTS(q, &q.pathRTT, int64(d))
}

// startCongestion gives a selective-repeat window of max packets its
// controller, if congestion control is on. psn is the first PSN to be
// sent.
func (q *QP) startCongestion(max int, psn uint32) {
	if q.congestion && q.comp.sb != nil {
		cc := newDelayGated(max, psn)
		cc.pathRTT = q.pathRTT
		if q.dev.clock != nil {
			cc.pace.quantum = paceQuantum
		}
		q.comp.win.cc = cc
		// The window starts at the controller's, not at max: until the
		// first ACK, nothing else would hold the first flight to it.
		// With a 2048-packet window that flight, sent before any round
		// trip paced it, began the resend storms seen at a 100 Mbit/s
		// link (1,100-1,900 PSNs in flight in their first second).
		q.comp.win.cwnd = cc.Inflight()
	}
	q.ccEvents = 0
	q.paceAt = 0
}

// ccSample feeds the controller the round trip of psn, just reported to
// have arrived, when psn was sent once (Karn's rule).
func (q *QP) ccSample(psn uint32, now int64) {
	cc, sb := q.comp.win.cc, q.comp.sb
	if cc == nil || sb == nil {
		return
	}
	i := sb.index(psn)
	if sb.at[i] != 0 || sb.sentAt[i] == 0 {
		return
	}
	rtt := now - sb.sentAt[i]
	if q.holdEcho {
		cc.OnHostDelay(rtt - networkRTT(rtt, q.hostDelay(psn)))
	}
	cc.OnRTTSample(now, rtt)
}

// ccSent charges one transmission to the pacer.
func (q *QP) ccSent(now int64) {
	if cc := q.comp.win.cc; cc != nil {
		cc.OnPacketSent(now)
		q.countCongestion()
	}
}

// countCongestion brings the QP's CongestionEvents counter up to the
// controller's count.
func (q *QP) countCongestion() {
	cc := q.comp.win.cc
	if cc == nil {
		return
	}
	if _, ev := cc.Stats(); ev > q.ccEvents {
		q.count(cCongestionEvents, ev-q.ccEvents)
		q.ccEvents = ev
	}
}

// pacingRate is the pacer's rate in bytes per second, 0 when not paced.
func (q *QP) pacingRate() uint64 {
	cc := q.comp.win.cc
	if cc == nil {
		return 0
	}
	pps, _ := cc.Stats()
	return uint64(pps * float64(q.mtu))
}

// paced reports whether the pacer holds the next packet back, and then
// has the QP's timer wake the requester when it may go.
func (q *QP) paced() bool {
	cc := q.comp.win.cc
	if cc == nil {
		return false
	}
	now := nanotime()
	wait := cc.TimeUntilSend(now)
	if wait == 0 {
		return false
	}
	if q.paceAt == 0 || q.paceAt > now+wait {
		q.paceAt = now + wait
		q.armTimer()
	}
	return true
}

// onPaceTimer resends what the pacer held back and runs the requester
// once the pacer's wait is over. The caller holds q.mu.
func (q *QP) onPaceTimer(now int64) {
	if q.paceAt == 0 || now < q.paceAt {
		return
	}
	q.paceAt = 0
	q.repair()
	q.runRequester()
}

// paceDeadline is when the QP's timer must wake the paced requester, 0
// when it need not.
func (q *QP) paceDeadline() int64 {
	if q.attr.State != verbs.QPSRTS {
		return 0
	}
	return q.paceAt
}
