package softroce

import (
	"fmt"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// Each QP has one runtime timer (time.AfterFunc, part of the runtime's
// single timer heap, with no goroutine until it fires). Deadlines are kept
// in the QP and the timer is re-armed lazily: moving a deadline later does
// not touch the timer; when it fires early it re-arms for what is left.

var epoch = time.Now()

// nanotime is monotonic time in nanoseconds.
func nanotime() int64 { return int64(time.Since(epoch)) }

// ackTimeout is the local ACK timeout of IBA 9.7.6.1.3: 4.096 µs × 2^t; 0 disables it.
func ackTimeout(t uint8) int64 {
	if t == 0 {
		return 0
	}
	return 4096 << t
}

// maxBackoffShift caps the doubling of the ACK timeout at 64 times.
const maxBackoffShift = 6

// rnrTimes are the RNR NAK timer values of IBA table 45, in microseconds.
var rnrTimes = [32]int64{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// rnrTimeout decodes an RNR timer code into nanoseconds.
func rnrTimeout(code uint8) int64 { return rnrTimes[code&31] * 1000 }

// armAckTimer starts the local ACK timeout if it is enabled.
func (q *QP) armAckTimer() {
	if q.attr.State != verbs.QPSRTS {
		return
	}
	t := ackTimeout(q.attr.Timeout)
	if t == 0 {
		return
	}
	if q.comp.sb != nil {
		now := nanotime()
		t = q.selectiveRTO(t, now)
		q.comp.rtoArmed = t
		q.comp.ackDeadline = now + t
		q.armTimer()
		return
	}
	// A measured round trip longer than the configured timeout (a loaded
	// receiver, a deep queue) raises it, so that it does not expire on
	// packets that are merely late.
	t = max(t, q.comp.rtt.timeout())
	// Each retry without progress doubles the wait, as TCP's RTO does, so
	// that a queue that is merely slow (a loaded receiver, a long burst
	// ahead of our packets) is not declared dead after retry_cnt × timeout.
	// IBA sets only the minimum: the timer must not expire earlier.
	if used := q.attr.RetryCnt - q.comp.retryLeft; used > 0 {
		t <<= min(used, maxBackoffShift)
	}
	q.comp.ackDeadline = nanotime() + t
	q.armTimer()
}

// minRTO is the shortest retransmission timeout of a selective-repeat QP.
const minRTO = int64(2 * time.Millisecond)

// selectiveRTO is the retransmission timeout of a selective-repeat QP,
// whose peer is another rsock (the extension is negotiated): the RFC 6298
// estimate from measured round trips, at least the floor (minRTO, raised
// after spurious timeouts: rtofloor.go) and at most the configured ACK
// timeout cfg, doubled for each timeout without progress up to 64 times
// cfg. A timeout costs little (only the PSNs not known to have arrived
// are sent again), so it need not wait for the IBTA's minimum, which on a
// datacenter path is thousands of round trips. now is the time the caller
// arms it at.
func (q *QP) selectiveRTO(cfg, now int64) int64 {
	t := cfg
	if rto := q.comp.rtt.timeout(); rto > 0 {
		t = min(max(rto, q.comp.rtoFloor.at(now)), cfg)
	}
	return min(t<<min(q.comp.backoff, 20), cfg<<maxBackoffShift)
}

// armAckTimerNow restarts the local ACK timeout while requests are
// outstanding, and stops it otherwise.
func (q *QP) armAckTimerNow() {
	if q.sqHead == q.sqNext && q.inflight() == 0 {
		q.comp.ackDeadline = 0
		return
	}
	q.armAckTimer()
}

// armTimer makes sure the timer fires no later than the nearest deadline.
func (q *QP) armTimer() {
	next := q.comp.ackDeadline
	for _, d := range [...]int64{q.comp.rnrDeadline, q.resp.ackDue, q.resp.readDue, q.paceDeadline()} {
		if d != 0 && (next == 0 || d < next) {
			next = d
		}
	}
	if next == 0 || q.closed {
		return
	}
	if c := q.dev.clock; c != nil && next-nanotime() < fineHorizon {
		// A near deadline: the device's fine clock wakes the QP in time
		// (fineclock.go), where the runtime timer would wake it up to a
		// millisecond late.
		if q.clockAt == 0 || next < q.clockAt {
			q.clockAt = next
			c.schedule(q, next)
		}
		return
	}
	if q.timerAt != 0 && q.timerAt <= next {
		return
	}
	q.timerAt = next
	q.timer.Reset(time.Duration(next - nanotime()))
}

func (q *QP) stopTimer() {
	q.timer.Stop()
	q.timerAt = 0
	q.clockAt = 0
	q.comp.ackDeadline = 0
	q.comp.rnrDeadline = 0
	q.resp.ackDue = 0
	q.resp.readDue = 0
	q.paceAt = 0
}

// onTimer runs when the QP's timer fires: it ends an RNR wait, or handles
// a local ACK timeout with a go-back-N retry or, when retries are used up,
// a WCRetryExcErr completion.
func (q *QP) onTimer() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timerAt = 0
	q.expire()
}

// onFineClock runs when the device's fine clock reaches the QP's near
// deadline; it does what onTimer does.
func (q *QP) onFineClock() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.clockAt = 0
	q.expire()
}

// expire handles every deadline of the QP that has passed, and arms the
// timers for the rest. The caller holds q.mu.
func (q *QP) expire() {
	if q.closed {
		return
	}
	now := nanotime()
	if d := q.resp.ackDue; d != 0 && now >= d {
		// Cleared first: the flush releases q.mu while it sends, and a
		// request that arrives meanwhile holds its own ACK with a new
		// deadline, which clearing after the flush would lose (the ACK
		// then waited for the requester's timeout).
		q.resp.ackDue = 0
		q.flushOwedAck()
	}
	if d := q.resp.readDue; d != 0 && now >= d {
		q.resp.readDue = 0
		// Last: it transmits, releasing q.mu.
		defer q.continueRead()
	}
	if q.attr.State != verbs.QPSRTS {
		q.armTimer()
		return
	}
	if d := q.comp.rnrDeadline; d != 0 && now >= d {
		q.comp.rnrDeadline = 0
		q.req.rnrWait = false
		q.comp.rewound = false
		q.retransmit(q.comp.rnrPSN)
		q.armAckTimerNow()
		q.runRequester()
	}
	q.onPaceTimer(now)
	if d := q.comp.ackDeadline; d != 0 && now >= d {
		q.comp.ackDeadline = 0
		if q.sqHead != q.sqNext || q.inflight() > 0 {
			q.count(cTimeouts, 1)
			if q.comp.sb != nil {
				// Timeouts shorter than the configured one do not use up
				// retries: the QP gives up after as long as go-back-N would.
				q.comp.backoff++
				if q.comp.rtoArmed < ackTimeout(q.attr.Timeout) {
					q.comp.retryLeft++
				}
			}
			if q.comp.retryLeft == 0 {
				q.count(cRetryExceeded, 1)
				if q.sendErr != nil {
					q.cause = fmt.Errorf("softroce: no acknowledgement after %d retries; the link last failed to send: %w", q.attr.RetryCnt, q.sendErr)
				} else if err := q.pathMTUCause(); err != nil {
					q.cause = err
				}
				q.fail(q.sqHead, verbs.WCRetryExcErr)
				return
			}
			q.comp.retryLeft--
			q.comp.rewound = false
			q.comp.readWait = false
			if q.comp.sb != nil && q.comp.rtoArmed < ackTimeout(q.attr.Timeout) {
				// A short selective-repeat timeout is a tail loss more
				// often than a dead path: halve, as for any loss.
				q.comp.win.onLoss(psnAdd(q.comp.ackedPSN, 1), q.req.highPSN)
			} else {
				q.comp.win.onTimeout(q.req.highPSN)
			}
			q.comp.rtt.discard()
			oldest := psnAdd(q.comp.ackedPSN, 1)
			if sb := q.comp.sb; sb != nil && !q.oldestIsRdAtomic(oldest) {
				if q.comp.backoff >= 2 {
					// A second timeout without progress: resending what
					// the scoreboard calls lost did not help, so its
					// reports of arrivals are not to be trusted.
					sb.forget()
				}
				sb.timedOut()
				c := &q.comp
				c.timeoutPSN, c.timeoutEnd, c.timeoutAt = oldest, q.req.highPSN, now
				c.timeoutResends, c.timeoutDups = 0, 0
				q.repair()
			} else {
				// Go-back-N; with selective repeat also for a READ or
				// atomic, whose lost response the scoreboard cannot see.
				q.retransmit(oldest)
			}
			q.armAckTimer()
			q.runRequester()
		}
	}
	q.armTimer()
}

// oldestIsRdAtomic reports whether psn, the oldest unacknowledged PSN,
// belongs to a READ or atomic request.
func (q *QP) oldestIsRdAtomic(psn uint32) bool {
	idx := q.wqeAt(psn)
	if idx == q.sqTail {
		return false
	}
	w := &q.sq[idx%uint32(len(q.sq))]
	return w.containsPSN(psn) && w.isRdAtomic()
}
