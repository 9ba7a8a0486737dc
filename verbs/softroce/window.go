package softroce

// The requester's send window. Go-back-N resends everything after a lost
// packet, so a window much larger than the path's loss allows turns each
// loss into a burst of retransmissions. The window therefore follows the
// loss evidence, Reno style: it halves on a sequence NAK or a READ
// response gap (once per window of data), falls to the minimum on a local
// ACK timeout, and grows back, exponentially up to the last threshold and
// by one packet per window after that. It starts at the device's
// MaxInflight, the size a clean path needs.

// minWindow is the smallest send window, in packets.
const minWindow = 8

// sendWindow is a congestion window in packets.
type sendWindow struct {
	cwnd     int    // packets allowed in flight
	ssthresh int    // below it the window grows by one per acknowledged packet
	acked    int    // packets acknowledged toward the next +1 above ssthresh
	recover  uint32 // losses before this PSN belong to an event already counted
	max      int
}

func newSendWindow(max int, psn uint32) sendWindow {
	return sendWindow{cwnd: max, ssthresh: max, max: max, recover: psn}
}

// onAck grows the window for n newly acknowledged packets.
func (w *sendWindow) onAck(n int) {
	if w.cwnd < w.ssthresh {
		w.cwnd = min(w.cwnd+n, w.ssthresh)
		return
	}
	w.acked += n
	for w.acked >= w.cwnd && w.cwnd < w.max {
		w.acked -= w.cwnd
		w.cwnd++
	}
	if w.cwnd >= w.max {
		w.acked = 0
	}
}

// onLoss shrinks the window after a loss at psn; high is one past the
// highest PSN sent. Losses within the window that was in flight at the
// last reduction do not shrink it again.
func (w *sendWindow) onLoss(psn, high uint32) {
	if psnDiff(psn, w.recover) < 0 {
		return
	}
	w.ssthresh = max(w.cwnd/2, minWindow)
	w.cwnd = w.ssthresh
	w.acked = 0
	w.recover = high
}

// onTimeout collapses the window after a local ACK timeout.
func (w *sendWindow) onTimeout(high uint32) {
	w.ssthresh = max(w.cwnd/2, minWindow)
	w.cwnd = minWindow
	w.acked = 0
	w.recover = high
}

// rttEstimator measures round trips as RFC 6298 does, one sample at a
// time and never across a retransmission (Karn's rule), so that the local
// ACK timeout can grow to cover a receiver that is slow but alive.
type rttEstimator struct {
	srtt, rttvar int64  // ns; srtt 0 means no sample yet
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
	r.timing = false
	m := now - r.start
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
