package softroce

import "github.com/rsock-go/rsock/verbs/softroce/wire"

// The requester's send window, in packets.
//
// Go-back-N resends everything after a lost packet, so a window much
// larger than the path's loss allows turns each loss into a burst of
// retransmissions. Its window therefore follows the loss evidence, Reno
// style: it halves on a sequence NAK or a READ response gap (once per
// window of data), falls to the minimum on a local ACK timeout, and grows
// back, exponentially up to the last threshold and by one packet per
// window after that.
//
// Selective repeat resends only what was lost, so a loss costs one packet,
// not a window, and the window answers the rate of loss instead of each
// loss event (as DCTCP answers the fraction of marked packets): at the end
// of each round trip (a window of data acknowledged) it shrinks by half
// the fraction of that round's packets that were lost. Scattered random
// loss, which shrinking cannot cure, barely moves it (1% loss costs 0.5%
// of the window per round trip); a round that loses everything halves it,
// so it still halves at most once per round trip. It grows back by one
// packet per 8 acknowledged (an eighth per round trip), so that it regains
// its size in a few round trips where Reno's one packet per round trip
// would take hundreds. The two balance at 25% loss: below that a window
// stays large enough to keep reports coming, where a small window turns
// each lost report into a timeout; above it, or when a queue overflows
// (where loss grows with the window), it shrinks.
//
// Both start at the device's MaxInflight, the size a clean path needs.

// minWindow is the smallest send window, in packets.
const minWindow = 8

// proportionalGrowth is how many acknowledged packets grow a
// selective-repeat window above its threshold by one packet.
const proportionalGrowth = 8

// sendWindow is a congestion window in packets.
type sendWindow struct {
	cwnd     int    // packets allowed in flight
	ssthresh int    // below it the window grows by one per acknowledged packet
	acked    int    // packets acknowledged toward the next +1 above ssthresh
	recover  uint32 // go-back-N: losses before this PSN belong to an event already counted
	max      int

	// Selective repeat: the loss rate of each round trip.
	proportional bool
	roundEnd     uint32 // the round ends once this PSN is acknowledged
	roundAcked   int    // packets acknowledged in the round
	roundLost    int    // packets resent as lost in the round

	// cc, when set (congestion control negotiated), decides cwnd instead
	// (congestion.go).
	cc congestionControl
}

// newSendWindow returns a go-back-N window of max packets; psn is the
// first PSN to be sent.
func newSendWindow(max int, psn uint32) sendWindow {
	return sendWindow{cwnd: max, ssthresh: max, max: max, recover: psn}
}

// newProportionalWindow returns a selective-repeat window of max packets.
func newProportionalWindow(max int, psn uint32) sendWindow {
	w := newSendWindow(max, psn)
	w.proportional = true
	w.roundEnd = psn
	return w
}

// onAck grows the window for n newly acknowledged packets; acked is the
// newest PSN acknowledged and high one past the highest PSN sent.
func (w *sendWindow) onAck(n int, acked, high uint32) {
	if w.cc != nil {
		w.cc.OnPacketsAcked(n, acked, high)
		w.cwnd = w.cc.Inflight()
		return
	}
	if w.proportional {
		w.roundAcked += n
		if psnDiff(acked, w.roundEnd) >= 0 {
			w.endRound(high)
		}
	}
	if w.cwnd < w.ssthresh {
		w.cwnd = min(w.cwnd+n, w.ssthresh)
		return
	}
	w.acked += n
	step := w.cwnd
	if w.proportional {
		step = proportionalGrowth
	}
	for w.acked >= step && w.cwnd < w.max {
		w.acked -= step
		w.cwnd++
		if !w.proportional {
			step = w.cwnd
		}
	}
	if w.cwnd >= w.max {
		w.acked = 0
	}
}

// endRound applies the loss rate of the round that just ended and starts
// the next, which ends with the PSNs sent so far.
func (w *sendWindow) endRound(high uint32) {
	if lost := w.roundLost; lost > 0 {
		cut := w.cwnd * lost / (2 * (w.roundAcked + lost))
		w.cwnd = max(w.cwnd-max(cut, 1), minWindow)
		w.ssthresh = w.cwnd
		w.acked = 0
	}
	w.roundEnd = psnAdd(high, wire.PSNMask)
	w.roundAcked, w.roundLost = 0, 0
}

// onResent counts n packets sent again because they were lost
// (selective repeat).
func (w *sendWindow) onResent(n int) {
	if w.cc != nil {
		w.cc.OnPacketsLost(n)
		w.cwnd = w.cc.Inflight() // a loss burst halves it at once
		return
	}
	w.roundLost += n
}

// onLoss shrinks a go-back-N window after a loss at psn; high is one past
// the highest PSN sent. Losses within the window that was in flight at the
// last reduction do not shrink it again. A selective-repeat window counts
// its losses with onResent instead.
func (w *sendWindow) onLoss(psn, high uint32) {
	if w.proportional || psnDiff(psn, w.recover) < 0 {
		return
	}
	w.ssthresh = max(w.cwnd/2, minWindow)
	w.cwnd = w.ssthresh
	w.acked = 0
	w.recover = high
}

// onSpuriousResends tells the controller that n resends, the newest sent
// at resentAt, proved spurious, and reports whether it undid a reduction
// (the window then follows it).
func (w *sendWindow) onSpuriousResends(n int, resentAt int64) bool {
	if w.cc == nil || !w.cc.OnSpuriousResends(n, resentAt) {
		return false
	}
	w.cwnd = w.cc.Inflight()
	return true
}

// onTimeout collapses the window after a local ACK timeout.
func (w *sendWindow) onTimeout(high uint32) {
	if w.cc != nil {
		w.cc.OnTimeout(high)
		w.cwnd = w.cc.Inflight()
		return
	}
	w.ssthresh = max(w.cwnd/2, minWindow)
	w.cwnd = minWindow
	w.acked = 0
	w.recover = high
	w.roundEnd = psnAdd(high, wire.PSNMask)
	w.roundAcked, w.roundLost = 0, 0
}

// rttEstimator measures round trips as RFC 6298 does, one sample at a
// time and never across a retransmission (Karn's rule), so that the local
// ACK timeout can grow to cover a receiver that is slow but alive.
type rttEstimator struct {
	srtt, rttvar int64  // ns; srtt 0 means no sample yet
	min          int64  // the smallest sample (ns), 0 before the first
	timing       bool   // a sample is in progress
	psn          uint32 // the packet being timed
	start        int64  // when it was sent
}

// sent starts timing psn if no sample is in progress.
func (r *rttEstimator) sent(psn uint32, now int64) {
	if !r.timing {
		r.timing, r.psn, r.start = true, psn, now
	}
}

// acked ends the sample when acked covers it.
func (r *rttEstimator) acked(acked uint32, now int64) {
	if !r.timing || psnDiff(acked, r.psn) < 0 {
		return
	}
	r.sample(now)
}

// arrived ends the sample when psn, reported to have arrived on its own
// (past a gap, by a selective NAK), is the packet being timed.
func (r *rttEstimator) arrived(psn uint32, now int64) {
	if r.timing && r.psn == psn {
		r.sample(now)
	}
}

// sample ends the sample in progress at now.
func (r *rttEstimator) sample(now int64) {
	r.timing = false
	m := now - r.start
	if r.min == 0 || m < r.min {
		r.min = max(m, 1)
	}
	if r.srtt == 0 {
		r.srtt, r.rttvar = m, m/2
		return
	}
	d := r.srtt - m
	if d < 0 {
		d = -d
	}
	r.rttvar += (d - r.rttvar) / 4
	r.srtt += (m - r.srtt) / 8
}

// discard drops the sample in progress (its packet is being resent).
func (r *rttEstimator) discard() { r.timing = false }

// timeout is the retransmission timeout the measurements call for, or 0
// before the first sample.
func (r *rttEstimator) timeout() int64 {
	if r.srtt == 0 {
		return 0
	}
	return r.srtt + 4*r.rttvar
}
