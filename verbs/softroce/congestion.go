package softroce

import (
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Congestion control between rsock peers (negotiated, on top of selective
// repeat): the window answers a queue that builds, not each loss.
//
// Selective repeat makes a random loss cheap (one packet resent), and the
// proportional window of window.go keeps goodput under random loss. But
// at a real bottleneck it behaves as if every loss were random, and a
// queue that overflows costs other flows. The controller here tells the
// two apart by the queueing delay that goes with them, as TCP Veno and
// delay-based controllers (Vegas, Swift, BBR's min-RTT) do: rsock samples
// the round trip of every acknowledged packet that was sent once, and
// the least sample of the last two round trips, less the least seen on
// the path in the last 10 to 20 s (minRTT), is the queue the flow stands
// behind. The target is 1 ms (or half of minRTT, if longer): above the
// scheduling noise of a loaded host, below a 2 ms router queue.
//
//   - Loss while the queue is over the target is congestion: the window
//     halves (Reno's decrease).
//   - So is a round that loses a third of its packets or more, whatever
//     the delay says: a minimum round trip taken behind a queue (the
//     first window's own at a slow link, another flow's standing queue)
//     hides the queue from the delay, and random loss that heavy is rare.
//   - A round that resends a whole window, a third of its packets or
//     more, before it ends halves the window then (lossBurst): a round
//     ends when the cumulative ACK passes it, which resends that are
//     lost too put off for many round trips.
//   - Other loss, with no queue, is random: the window shrinks by half
//     that round's loss share, as window.go's does.
//   - With no loss, a queue over the target shrinks the window in
//     proportion to the excess (Swift: by 0.8 × excess/delay, at most by
//     half, at least a packet), and does not grow, so that a flow alone
//     keeps the queue short and drops little. While the queue is the
//     flow's own, the round trip falls with the window and the rate
//     (cwnd per round trip) holds; once the rate has halved since the
//     queue began to stand and the queue still stands, the queue is
//     another's, and delay shrinks the window no
//     further (without this, twelve rounds of delay decrease left a tenth
//     of the window when competing began).
//   - A queue that stays over the target for competeRounds round trips,
//     although the window shrank, is kept full by another flow that
//     fills queues (TCP): the controller stops yielding to delay and
//     competes on loss alone (cubic.go: back to half the window per
//     lossy round, Reno's decrease, and growth along CUBIC's curve or
//     its Reno line, whichever is ahead), until the queue is seen
//     drained for drainRounds round trips in a row, and for as long as
//     the flow had competed, up to maxDrainWait (Copa's mode switch,
//     with hysteresis): a loss-based flow drains a short queue after
//     each of its reductions, for a shorter time than it then keeps it
//     full. Linux's TCP runs CUBIC, but the same response to the same
//     queue does not take the same share: at a drop-tail queue rsock's
//     packets are dropped about a third as often per packet as TCP's,
//     and CUBIC's 0.7 took 0.61 to 0.73 of a 100 Mbit/s link (an
//     earlier, firmer rule, 0.8 and a 32nd of the window per round trip,
//     0.69 to 0.73); Reno's 0.5 with CUBIC's growth is less aggressive
//     than either TCP and takes about half (cubicBeta). If the flow has
//     lost no packet yet, the window's decreases were for delay alone,
//     which the queue being another's proves wrong: competing begins
//     with them taken back, in slow start (a probe, as a TCP flow
//     joining the queue would, but growing by a quarter per round trip,
//     HyStart++'s conservative slow start) until the first loss or until
//     the probe's own queue stands a target over the one it began behind
//     (slowStartQueue).
//   - A reduction is not repeated for the round trip after it, whose
//     evidence was sent before it took effect (Reno's recovery).
//   - A reduction for loss whose resends all proved spurious (the peer
//     received each twice, as its duplicate echoes say) is taken back
//     (congestion_undo.go, as TCP's DSACK undo).
//   - Growth is up to eight packets per round trip while yielding to
//     delay (additive, so that rsock flows converge to fair shares; no
//     more than a quarter of the packets the target queue holds, so that
//     a slow path's small queue is not filled in one step), an eighth
//     of the window when no queue is seen at all (up to slowStartLimit;
//     additive past it), and doubling per round trip in slow start:
//     from initialWindow up to slowStartLimit, and after a timeout.
//     Random loss does not end slow start; a queue over the target or a
//     loss at one does.
//
// Every packet is paced (pacer.go) at a rate of the window per round
// trip, times 1.25 (2 in slow start and while competing); the round trip
// is the smoothed one, or the minimum plus the queue the last rounds and
// the round in progress show, when that is shorter (paceQueue).

// congestionControl is the shape of a sender's congestion controller, as
// quic-go's SendAlgorithm: events in, a window and a pacing rate out.
// Times are monotonic ns, windows and counts in packets.
type congestionControl interface {
	// OnPacketSent counts a transmission (first or resent).
	OnPacketSent(now int64)
	// OnPacketsAcked counts n packets newly acknowledged; acked is the
	// newest PSN acknowledged, high one past the highest PSN sent.
	OnPacketsAcked(n int, acked, high uint32)
	// OnRTTSample feeds the round trip of one packet sent once.
	OnRTTSample(now, rtt int64)
	// OnHostDelay feeds how long the hosts held a packet and its ACK
	// (hold echoes, holdecho_qp.go), of the sample that follows.
	OnHostDelay(d int64)
	// OnPacketsLost counts n packets resent because they were lost.
	OnPacketsLost(n int)
	// OnECNMarks counts n packets the peer reported CE-marked.
	OnECNMarks(n int)
	// OnSpuriousResends counts n resends that the peer reported it
	// received twice, the newest resent at resentAt (ns); it reports
	// whether that undid the window's last reductions.
	OnSpuriousResends(n int, resentAt int64) bool
	// OnTimeout collapses the window after a retransmission timeout.
	OnTimeout(high uint32)
	// Cwnd is the congestion window: the packets the network holds.
	Cwnd() int
	// Inflight is how many packets may be unacknowledged: the window, and
	// while competing those the hosts hold, up to twice the window.
	Inflight() int
	// TimeUntilSend is how long the next packet waits for the pacer (0:
	// send now).
	TimeUntilSend(now int64) int64
	// Stats reports the pacing rate (packets per second, 0 when not
	// paced) and the congestion events so far.
	Stats() (pacingRate float64, events uint64)
}

const (
	// ccMinWindow is the controller's smallest window, in packets.
	ccMinWindow = 4
	// initialWindow is the first window, in packets; slow start doubles
	// it per round trip up to the device's MaxInflight (a few round trips
	// on a datacenter path), and so finds a small queue before it floods
	// it.
	initialWindow = 32
	// targetDelay is the queueing delay the controller lets build before
	// it shrinks the window without loss, and above which a loss counts
	// as congestion; minRTT/2 when that is longer.
	targetDelay = int64(time.Millisecond)
	// competeRounds is how many round trips in a row the queue must stand
	// over the target for the controller to compete as CUBIC does instead
	// of yielding to delay.
	competeRounds = 12
	// drainRounds is how many drained round trips in a row end competing,
	// if they also last as long as the flow had competed, up to
	// maxDrainWait.
	drainRounds  = 4
	maxDrainWait = int64(time.Second)
	// hystartSamples is how many round trips a round must have sampled,
	// all behind a queue over the target, for slow start to end within
	// it (RFC 9406's N_RTT_SAMPLE).
	hystartSamples = 8
	// minRTTWindow is how long a minimum round trip stays valid: the
	// minimum is taken over the current and the previous window, so that
	// it follows a path whose base delay grew.
	minRTTWindow = int64(10 * time.Second)
	// delayIncrease is the additive increase per round trip, in
	// packets, while the controller yields to delay.
	delayIncrease = 8
	// pacingGain and slowStartGain scale the pacing rate over cwnd/srtt.
	pacingGain    = 1.25
	slowStartGain = 2
	// slowStartLimit is where the first slow start ends if nothing ends
	// it sooner (the initial ssthresh), and where growth by an eighth of
	// the window per round trip with no queue stops: past it the window
	// grows additively (or along CUBIC's curve while competing). Slow
	// start doubles per round trip, and its pacing follows a smoothed
	// round trip that lags the queue it builds, so what it overshoots a
	// small queue by grows with where it may stop: with the 4 MiB rings
	// of the udp link (a 2048-packet window) and neither limit, rsock
	// alone dropped 3,565 packets at a 100 Mbit/s link's 20 ms queue
	// and 12,813 at its 2 ms queue (scripts/bottleneck-bench.sh, one run
	// each), against medians of 106 and 303 when a 512 KiB ring held
	// the window to about 370 packets. TCP's first slow start is held
	// the same way, by a receive window that grows per round trip with
	// what the reader takes. Not lower: rsock's default ring allows a
	// window of about 500, and a limit of 256, which made the window grow
	// additively from there, held rsock to 0.15-0.19 of a 1 Gbit/s link
	// beside a TCP flow at a 20 ms queue (5 runs), where 512 gave
	// 0.31-0.33 (3 runs, alternated).
	slowStartLimit = 512
	// probeGrowthDivisor divides slow start's growth in the probe with
	// which competing begins (RFC 9406's CSS_GROWTH_DIVISOR): the window
	// grows by a quarter per round trip, not doubles. The probe starts
	// behind a queue another flow keeps, and what is left of that queue
	// is smaller than a doubling: at 100 Mbit/s with a 20 ms queue beside
	// a TCP flow in its own slow start, a doubling probe (from 32 packets
	// to 124 in three round trips, in one trace) overflowed it, and the
	// flows' first 4 s dropped 16 to 118 packets (median 22, eight runs);
	// growing by a quarter, 10 to 15 (scripts/bottleneck-bench.sh,
	// DURATION=4s, the two alternated). Two TCP flows drop 7 to 11 as
	// they start. Over 20 s the share held (0.48 to 0.62, six runs).
	probeGrowthDivisor = 4
	// lossBurstMin is the fewest resends within a round that lossBurst
	// answers, for a small window.
	lossBurstMin = 16
	// maxPaceInterval is the longest the pacer spaces two packets.
	maxPaceInterval = int64(time.Millisecond)
)

// delayGated is the controller described above.
type delayGated struct {
	cwnd, ssthresh, max int
	// acked is the growth toward the next +1, in sixteenths of a packet;
	// in the probe, the packets acknowledged toward it
	// (probeGrowthDivisor).
	acked int

	// Minimum round trip: the least of the current window and the
	// previous one.
	minRTT, epochMin, prevMin int64
	epochStart                int64
	srtt                      int64 // smoothed over every sample (1/8)
	// hostDelay is how long the hosts hold a packet and its ACK,
	// smoothed over every sample (1/8), with hold echoes; srtt and
	// minRTT include it.
	hostDelay int64
	// pathRTT, when not 0, bounds minRTT from above: the least round trip
	// measured on the path by other means (the handshake's TCP
	// connection, before this flow sent), for a flow that starts behind
	// another's standing queue and would take the queue for the path.
	pathRTT int64

	roundEnd     uint32 // the round ends once this PSN is acknowledged
	roundMin     int64  // the least round trip sampled in the round; 0 none
	samples      int    // round trips sampled in the round
	lastMin      int64  // the same of the previous round
	hold         int    // rounds left whose losses answer for the last reduction
	roundAcked   int
	roundLost    int
	qdelay       int64   // the queueing delay of the last round that had a sample
	undrained    int     // rounds since the queue was last seen drained
	rate         float64 // cwnd per round trip at the last round's end, packets per ns; 0 unknown
	standRate    float64 // the delivery rate when the queue last began to stand
	drained      int     // while competing: drained rounds in a row
	standStart   int64   // when the queue last began to stand (ns)
	standCwnd    int     // the window when the queue last began to stand
	standMax     int64   // the highest queueing delay since then, or since it last halved (ns)
	probeQueue   int64   // during the probe competing began with, until a reduction ends it: the queueing delay when it began (ns, over the target); else 0
	lost         bool    // a round has lost packets, or a timeout expired
	competeSince int64   // while competing: when the queue that began it began to stand (ns)
	drainStart   int64   // while competing: when the drained rounds began (ns)

	cubic      cubic            // the window function while competing
	cuts       [maxCuts]lossCut // the latest reductions for loss, by cutSeq modulo maxCuts (congestion_undo.go)
	cutSeq     int
	now        int64 // the latest time an event brought (ns)
	roundStart int64 // when the round began (ns)

	events uint64
	pace   pacer
	ecn    ecnReaction // congestion_ecn.go
}

// newDelayGated returns a controller whose window starts at and never
// exceeds max packets; psn is the first PSN to be sent. The first slow
// start ends at slowStartLimit at the latest.
func newDelayGated(max int, psn uint32) *delayGated {
	return &delayGated{cwnd: min(initialWindow, max), ssthresh: min(max, slowStartLimit), max: max, roundEnd: psn, ecn: newECNReaction()}
}

var _ congestionControl = (*delayGated)(nil)

func (c *delayGated) Cwnd() int { return c.cwnd }

// Inflight adds to the window, while competing, the packets that wait
// in the hosts: of a round trip srtt the hosts hold hostDelay, so the
// window spent over the rest holds cwnd×hostDelay/(srtt−hostDelay)
// more packets at its rate, none of them in the network. TCP's kernel
// acknowledges in the softirq that received; without this, a window
// that shares a bottleneck's losses with a TCP flow's buys a rate lower
// by the round trips' ratio. Only while competing, where loss and not
// delay sets the window: yielding to delay, a receiver that cannot keep
// up is the flow's bottleneck, and its socket's queue is the queue to
// keep short (with the holds let in flight and the round trip taken
// without them, a flow on a clean veth whose receiver was saturated
// resent 6,432 packets where 503 arrived late before, and 146,455
// against 29,072 at 1% loss). At most twice the window, so that a host
// that falls behind holds a window's worth at most.
func (c *delayGated) Inflight() int {
	if !c.competing() || c.hostDelay <= 0 || c.srtt <= 0 {
		return c.cwnd
	}
	extra := int64(c.cwnd) * c.hostDelay / max(c.srtt-c.hostDelay, c.srtt/8)
	return min(c.cwnd+int(min(extra, int64(c.cwnd))), c.max)
}

func (c *delayGated) OnHostDelay(d int64) {
	d = max(d, 0)
	if c.hostDelay == 0 {
		c.hostDelay = d
	} else {
		c.hostDelay += (d - c.hostDelay) / 8
	}
}

func (c *delayGated) Stats() (float64, uint64) {
	if c.pace.interval == 0 {
		return 0, c.events
	}
	return float64(time.Second) / float64(c.pace.interval), c.events
}

// target is the queueing delay the controller tolerates.
func (c *delayGated) target() int64 { return max(targetDelay, c.minRTT/2) }

// competing reports whether a standing queue made the controller compete
// on loss alone.
func (c *delayGated) competing() bool { return c.undrained >= competeRounds }

func (c *delayGated) OnPacketSent(now int64) {
	c.now = now
	c.pace.sent(now)
}

func (c *delayGated) TimeUntilSend(now int64) int64 { return c.pace.timeUntilSend(now) }

func (c *delayGated) OnRTTSample(now, rtt int64) {
	if rtt <= 0 {
		return
	}
	c.now = now
	if c.srtt == 0 {
		c.srtt = rtt
	} else {
		c.srtt += (rtt - c.srtt) / 8
	}
	if c.roundMin == 0 || rtt < c.roundMin {
		c.roundMin = rtt
	}
	c.samples++
	if q, ok := c.slowStartQueue(); ok && c.cwnd < c.ssthresh && c.minRTT > 0 && c.samples >= hystartSamples && c.roundMin-c.minRTT > q+c.target() {
		// Slow start ends within the round in which every sample so far
		// stood behind a queue over the target (HyStart++, RFC 9406):
		// waiting for the round's end, and for the second round that
		// the least of two needs, let slow start double twice more
		// through a queue already growing (at 100 Mbit/s with a 20 ms
		// queue, rsock alone overflowed it by up to 3,000 packets).
		c.ssthresh = c.cwnd
	}
	if c.epochMin == 0 || rtt < c.epochMin {
		c.epochMin = rtt
	}
	if now-c.epochStart >= minRTTWindow {
		c.prevMin, c.epochMin, c.epochStart = c.epochMin, rtt, now
	}
	c.minRTT = c.epochMin
	if c.prevMin > 0 && c.prevMin < c.minRTT {
		c.minRTT = c.prevMin
	}
	if c.pathRTT > 0 {
		c.minRTT = min(c.minRTT, c.pathRTT)
	}
	c.setPacing()
}

func (c *delayGated) OnPacketsLost(n int) {
	c.roundLost += n
	c.countCutResends(n)
	if c.roundLost >= max(c.cwnd, lossBurstMin) && 3*c.roundLost >= c.roundAcked+c.roundLost {
		c.lossBurst()
	}
}

// lossBurst answers a round that has resent a whole window, a third or
// more of its packets, before it ended: the window halves now, not at
// the round's end. A round ends when the cumulative ACK passes it, and
// while the resends are lost too it does not: at a 100 Mbit/s link whose
// queue a TCP flow kept full, one round lasted 0.16 s (22 round trips)
// and resent 2,350 packets, while slow start grew the window from 32 to
// 219 on the ACKs that did come. Each further window of resends within
// the round halves the window again, as TCP's timeout would collapse it.
// Random loss does not do this: at 20% loss a round resends about a
// quarter of a window.
func (c *delayGated) lossBurst() {
	c.lost = true
	before := c.saveCut()
	w := c.cwnd / 2
	if c.competing() {
		// CUBIC's curve starts again from here (cubicBeta is a half as
		// well). Left on an epoch that began long before, the curve stood
		// far past its peak and grew the halved window by half of itself
		// per round trip: a flow alone at a 100 Mbit/s link's 20 ms queue
		// went from 190 packets back to 380 within each 0.12 s round,
		// burst after burst, and dropped 21,452 packets in 20 s.
		w = c.cubic.onCongestion(c.cwnd, c.now)
	}
	c.reduce(w)
	c.recordCut(before)
	c.roundLost, c.roundAcked = 0, 0
	c.setPacing()
}

func (c *delayGated) OnPacketsAcked(n int, acked, high uint32) {
	c.roundAcked += n
	if psnDiff(acked, c.roundEnd) >= 0 {
		c.endRound(high)
	}
	switch {
	case c.cwnd < c.ssthresh && c.probeQueue > 0:
		// The probe joins a queue that already stands, as HyStart++'s
		// conservative slow start does (RFC 9406): a quarter of slow
		// start's growth (probeGrowthDivisor).
		c.acked += n
		c.cwnd = min(c.cwnd+c.acked/probeGrowthDivisor, c.ssthresh)
		c.acked %= probeGrowthDivisor
	case c.cwnd < c.ssthresh:
		c.cwnd = min(c.cwnd+n, c.ssthresh)
	default:
		// Growth per round trip, in sixteenths of a packet: CUBIC's
		// while competing; up to eight packets while yielding to delay
		// (additive, so that flows converge to fair shares), an eighth of
		// the window while no queue builds at all, up to slowStartLimit.
		var ai int
		if c.competing() {
			ai = int(16 * c.cubic.increase(c.cwnd, n, c.now, c.roundTrip()))
		} else {
			ai = 16 * c.delayIncrease()
			if c.qdelay > c.target() {
				// Over the target, the window does not grow (Swift): growth
				// in the round after each decrease undid it, and held a
				// flow's own queue over the target until it took the
				// queue for another flow's.
				ai = 0
			}
			if c.qdelay < c.target()/2 && c.cwnd < slowStartLimit {
				// Past slowStartLimit the growth is additive: a queue
				// builds faster than the least of two rounds' round trips
				// shows it, and an eighth per round of a window that large
				// overran a 100 Mbit/s link's 20 ms queue by thousands of
				// packets.
				ai = max(ai, 16*c.cwnd/proportionalGrowth)
			}
		}
		c.acked += n * ai
		for c.acked >= 16*c.cwnd && c.cwnd < c.max {
			c.acked -= 16 * c.cwnd
			c.cwnd++
		}
		if c.cwnd >= c.max {
			c.acked = 0
		}
	}
	c.setPacing()
}

// delayIncrease is the additive increase per round trip while the
// controller yields to delay: delayIncrease packets, but no more than a
// quarter of the packets the target queue holds at the flow's rate
// (cwnd × target / the last rounds' round trip), at least one. At 100 Mbit/s a 2 ms router queue
// holds 16 packets: eight more per round trip would fill half of it
// before the delay of the next round trip could say so.
func (c *delayGated) delayIncrease() int {
	rtt := c.roundTrip()
	if rtt <= 0 {
		return delayIncrease
	}
	return min(delayIncrease, max(1, int(int64(c.cwnd)*c.target()/(4*rtt))))
}

// roundTrip is the round trip the window is spent over: the minimum plus
// the last rounds' queue, or the smoothed round trip before a minimum is
// known.
func (c *delayGated) roundTrip() int64 {
	if c.minRTT > 0 {
		return c.minRTT + max(c.qdelay, 0)
	}
	return c.srtt
}

// endRound decides on the round trip that just ended, and starts the
// next, which ends with the PSNs sent so far.
func (c *delayGated) endRound(high uint32) {
	if m := minSample(c.roundMin, c.lastMin); m > 0 && c.minRTT > 0 {
		// The least of two rounds: one delayed sample (a descheduled
		// receiver) is no queue.
		c.qdelay = m - c.minRTT
	}
	// The delivery rate the window and the round trip allow (the least
	// of two rounds again: acknowledgements counted per round are too
	// bursty to time), or what the round delivered when that is less: a
	// window that doubled in slow start while the least of two rounds
	// lagged the queue it built seemed to go eight times faster than the
	// link, so the rate seemed to halve as soon as the queue stood, and a
	// flow alone took its own queue for another's
	// (TestCongestionOwnQueueLags).
	c.rate = 0
	if rtt := c.minRTT + max(c.qdelay, 0); rtt > 0 {
		c.rate = float64(c.cwnd) / float64(rtt)
	}
	if d := c.now - c.roundStart; c.roundStart > 0 && d > 0 && c.roundAcked > 0 {
		c.rate = min(c.rate, float64(c.roundAcked)/float64(d))
	}
	target := c.target()
	if c.probeQueue > 0 && c.cwnd < c.ssthresh && c.qdelay > c.probeQueue+target {
		// The probe's HyStart at the round's end too: a small window's
		// round samples fewer round trips than HyStart waits for (one or
		// two per round at 100 Mbit/s, where a flow alone had taken its
		// own queue for another's in its first rounds), and the probe ran
		// on to a loss of 190 packets.
		c.ssthresh = c.cwnd
	}
	switch {
	case c.qdelay > target:
		c.drained = 0
		if c.undrained == 0 {
			c.standRate, c.standStart = c.rate, c.roundStart
			c.standCwnd, c.standMax = c.cwnd, c.qdelay
		}
		if !c.competing() && 2*c.qdelay < c.standMax {
			// The queue has halved since it stood highest: the window's
			// decreases drain it, so it is this flow's own, and the
			// rounds toward competing count again from here. At 100
			// Mbit/s a flow alone whose first slow start overshot drained
			// its queue from 7.6 ms to just over the target in the 12
			// rounds, and competed (TestCongestionOwnQueueLags).
			c.undrained, c.standMax = 0, c.qdelay
		}
		c.standMax = max(c.standMax, c.qdelay)
		if c.undrained == competeRounds-1 && c.now-c.standStart < competeRounds*c.srtt {
			// Not before the queue has stood for competeRounds round
			// trips in time as well: a round ends when the packet sent
			// last at its start is acknowledged, and with a small window
			// and stalls for credit a round lasted half a round trip, so
			// that a flow alone at 100 Mbit/s whose queue hovered about
			// the target for 7 ms took it for another's.
			break
		}
		if c.undrained == competeRounds-1 {
			// Competing begins: CUBIC's curve starts from this window.
			c.cubic.reset()
			c.competeSince = c.standStart
			c.probeQueue = 0
			if !c.lost && c.roundLost == 0 {
				// No loss yet: the window shrank for delay alone, on the
				// guess that the queue was this flow's. It is another's,
				// so the window takes those decreases back and probes as
				// a TCP flow joining the queue would, in slow start until
				// its first loss. A flow that began behind a TCP flow's
				// 20 ms queue at 1 Gbit/s had shrunk from 32 packets to 6
				// in its first 0.1 s, and CUBIC's curve took 13 s to
				// bring it to 600. Only before the flow's first loss: at
				// 100 Mbit/s with a 2 ms queue, where a TCP flow's
				// recoveries drain the queue every few round trips and
				// rsock enters competing again each time, a probe at each
				// entry took 0.73 of the link instead of 0.65.
				// The probe ends at its first loss, or once its own queue
				// stands a target over the one it began behind (HyStart,
				// slowStartQueue): probing on to slowStartLimit, a flow
				// alone at a 100 Mbit/s link that had mistaken its own
				// queue for another's overflowed the 20 ms queue by
				// 841 and 1,275 packets, against 9 and 12 so.
				c.cwnd = max(c.cwnd, c.standCwnd)
				c.ssthresh = max(c.ssthresh, min(c.max, slowStartLimit))
				c.probeQueue = c.qdelay
				c.acked = 0
			}
		}
		c.undrained = min(c.undrained+1, competeRounds)
	case c.competing():
		// Competing ends once the queue has been drained for drainRounds
		// rounds in a row and for as long as the flow had competed
		// before (counted from when the queue that began it began to
		// stand; up to maxDrainWait), so that a competitor's dip does not
		// hand it the queue: a loss-based flow empties a short queue for
		// a few round trips after each of its reductions, and at a 2 ms
		// queue drainRounds alone passed within each of TCP's recoveries.
		if c.drained == 0 {
			c.drainStart = c.roundStart
		}
		competed := c.drainStart - c.competeSince
		if c.drained++; c.drained >= drainRounds && c.now-c.drainStart >= min(competed, maxDrainWait) {
			c.undrained = 0
		}
	default:
		c.undrained = 0
	}
	// A round that loses a third of its packets or more is congestion
	// whatever the delay says: random loss that heavy is rarer than a
	// minimum round trip taken behind a queue (the first window's own,
	// at a slow link; another flow's standing queue), which hides the
	// queue from the delay.
	if c.roundLost > 0 {
		c.lost = true
	}
	heavy := c.roundLost > 0 && 3*c.roundLost >= c.roundAcked+c.roundLost
	congested := c.qdelay > target || heavy
	recovering := c.hold > 0
	if recovering {
		c.hold--
	}
	before := c.saveCut()
	switch {
	case recovering:
		// This round's evidence was sent before the last reduction took
		// effect: it answers for the same congestion (Reno's recovery).
	case c.roundLost > 0 && c.competing():
		// Loss at a queue another flow keeps full: back off to half
		// (cubicBeta), so as to hold a fair share against it.
		c.reduce(c.cubic.onCongestion(c.cwnd, c.now))
		c.recordCut(before)
	case c.roundLost > 0 && congested:
		// Loss at a full queue: congestion.
		c.reduce(c.cwnd / 2)
		c.recordCut(before)
	case c.roundLost > 0:
		// Loss with no queue: random; shrink by half the loss share.
		// Slow start goes on: random loss says nothing of the queue.
		cut := c.cwnd * c.roundLost / (2 * (c.roundAcked + c.roundLost))
		c.cwnd = max(c.cwnd-max(cut, 1), ccMinWindow)
		c.acked = 0
		c.recordCut(before)
	case congested && !c.competing():
		// A queue builds: shrink in proportion to the excess delay
		// (Swift: by 0.8 × excess/delay, at most half).
		// While the queue is this flow's, a smaller window drains it and
		// the delivery rate holds (the link stays busy). Once the rate
		// has fallen to half of what it was when the queue began to
		// stand, and the queue still stands, it is another flow's:
		// shrinking further only hands it the link, so delay stops
		// shrinking the window (it competes once competeRounds have
		// passed).
		if c.standRate == 0 || c.rate == 0 || c.rate > c.standRate/2 {
			f := 0.8 * float64(c.qdelay-target) / float64(c.qdelay)
			// At least a packet: a small window over a small excess
			// rounded its decrease to nothing and kept the queue.
			c.reduce(c.cwnd - max(int(float64(c.cwnd)*min(f, 0.5)), 1))
		}
	}
	// CE marks (congestion_ecn.go): DCTCP's cut, unless this round
	// reduced the window already or answers for the last reduction.
	if w := c.ecn.endRound(c.roundAcked, c.cwnd); w < c.cwnd && !recovering && c.hold == 0 {
		c.reduce(w)
	}
	if recovering {
		c.sealCut()
	}
	c.roundEnd, c.roundStart = psnAdd(high, wire.PSNMask), c.now
	c.roundAcked, c.roundLost, c.lastMin, c.roundMin, c.samples = 0, 0, c.roundMin, 0, 0
}

// minSample is the least of two round-trip samples, 0 meaning none.
func minSample(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// reduce sets the window to w after a congestion event.
func (c *delayGated) reduce(w int) {
	c.cwnd = min(max(w, ccMinWindow), c.cwnd)
	c.ssthresh = c.cwnd
	c.acked = 0
	c.events++
	c.hold = 1
	c.probeQueue = 0
}

func (c *delayGated) OnTimeout(high uint32) {
	c.lost = true
	c.probeQueue = 0
	before := c.saveCut()
	c.ssthresh = max(c.cwnd/2, ccMinWindow)
	c.cwnd = ccMinWindow
	c.cubic.reset()
	c.acked = 0
	c.events++
	c.roundEnd, c.roundStart = psnAdd(high, wire.PSNMask), c.now
	c.roundAcked, c.roundLost, c.roundMin, c.lastMin, c.samples = 0, 0, 0, 0, 0
	c.hold = 1
	c.recordCut(before)
	c.setPacing()
}

// slowStartQueue is the queue slow start may build on before HyStart
// ends it: none; while competing, during the probe, the queue that stood
// when it began (the probe adds its own to another flow's); else HyStart
// does not apply (ok false): a queue another flow keeps full would end
// slow start after a timeout at once.
func (c *delayGated) slowStartQueue() (q int64, ok bool) {
	switch {
	case !c.competing():
		return 0, true
	case c.probeQueue > 0:
		return c.probeQueue, true
	}
	return 0, false
}

// paceQueue is the queueing delay the pacer spreads the window over: the
// last rounds' (qdelay), or the round in progress's least sample less
// minRTT once it has hystartSamples samples and that is more. A round
// lasts until the cumulative ACK passes it, and during a loss storm that
// took 0.1 s and longer, while qdelay still held the least of two
// rounds, one of which had a sample at minRTT: the pacer spread a window
// over 0.35 ms where srtt was 7 ms, 10 Gbit/s toward a 100 Mbit/s link.
func (c *delayGated) paceQueue() int64 {
	q := max(c.qdelay, 0)
	if c.samples >= hystartSamples && c.roundMin > 0 {
		q = max(q, c.roundMin-c.minRTT)
	}
	return q
}

// setPacing paces a window per smoothed round trip, times the gain.
func (c *delayGated) setPacing() {
	if c.srtt == 0 {
		c.pace.setInterval(0)
		return
	}
	// The round trip the window is spread over: the smoothed one, or the
	// last rounds' least when that is shorter (a descheduled receiver
	// inflates the average, not the least).
	rtt := c.srtt
	if c.minRTT > 0 {
		rtt = min(rtt, c.minRTT+c.paceQueue())
	}
	gain := pacingGain
	if c.cwnd < c.ssthresh || c.competing() {
		gain = slowStartGain
	}
	// The window, not the pacer, holds a flow back: a round trip inflated
	// by a stall (a descheduled peer, a timeout) must not space packets
	// further apart than maxPaceInterval.
	c.pace.setInterval(min(int64(float64(rtt)/(float64(c.cwnd)*gain)), maxPaceInterval))
}

// networkRTT is what the network took of a round trip rtt that the hosts
// held for host: at least an eighth of rtt, so that an overstated hold
// (a clock step, a forged echo) cannot make the path look free.
func networkRTT(rtt, host int64) int64 {
	return max(rtt-max(host, 0), rtt/8)
}
