package softroce

import (
	"math"
	"time"
)

// cubic is CUBIC's window function (RFC 9438), which the congestion
// controller follows while it competes with a flow that fills queues
// (congestion.go). Linux's TCP runs CUBIC by default, and a flow that
// grows as it does takes its share of a bottleneck as it does: Reno's
// additive increase (the "TCP-friendly" estimate) where windows are
// small or round trips short, the cubic curve where windows are large
// and loss is rare. The decrease is deeper than CUBIC's (cubicBeta), for
// the reason given there. Pure state: windows in packets, times in
// monotonic ns.
type cubic struct {
	wMax      float64 // the window before the last reduction
	wLastMax  float64 // wMax before that, for fast convergence
	k         float64 // seconds from the epoch's start until the curve is back at wMax
	epoch     int64   // when the current epoch (the time since the last reduction) began; 0 none
	wEst      float64 // Reno's window estimate over the epoch (RFC 9438, 4.3)
	cwndEpoch float64 // the window the epoch began at
}

const (
	// cubicBeta is the window kept after a congestion event: Reno's 0.5,
	// not CUBIC's 0.7 (RFC 9438's β_cubic). At a drop-tail queue beside a
	// TCP flow, rsock's packets are dropped less often than TCP's (why is
	// open: a pacing gain of 1.25 to 16 while competing did not change
	// the share): in one run at 100 Mbit/s with a 2 ms
	// queue, rsock lost 295 of 107,989 packets in 119 congestion events
	// while the TCP flow lost 351 of 53,110 in 188 recovery episodes,
	// about a third as many events per packet sent. Answering each with
	// CUBIC's 0.7 took 0.64 to 0.73 of that link (median 0.67, ten runs);
	// with 0.5 and CUBIC's growth kept, 0.53 to 0.59 (median 0.57, seven
	// runs, scripts/bottleneck-bench.sh, the builds alternated). A
	// smaller β with the same growth is less aggressive than CUBIC and
	// than Reno, as RFC 5033 asks of a new controller.
	cubicBeta = 0.5
	// tcpCubicBeta is the β of Linux's CUBIC, the flow this one shares a
	// queue with; the growth below is the one that goes with it.
	tcpCubicBeta = 0.7
	// cubicC scales the curve (RFC 9438's C, in packets per second³).
	cubicC = 0.4
	// cubicAlpha is the TCP-friendly estimate's increase per round trip
	// that matches Reno's throughput with CUBIC's decrease of
	// tcpCubicBeta (RFC 9438: 3(1−β)/(1+β)), about half a packet: the
	// growth of the TCP flow beside this one where its windows are small
	// or its round trips short. RFC 9438 raises it to 1 once the
	// estimate passes wMax; Linux's tcp_cubic keeps it.
	cubicAlpha = 3 * (1 - tcpCubicBeta) / (1 + tcpCubicBeta)
)

// reset forgets the curve: the next epoch starts afresh from the window
// it begins at (entering competition, after a timeout).
func (c *cubic) reset() { *c = cubic{} }

// onCongestion answers a congestion event at window cwnd, at now, with
// the window to reduce to.
func (c *cubic) onCongestion(cwnd int, now int64) int {
	w := float64(cwnd)
	// Fast convergence: a flow whose window peaks lower than before
	// releases bandwidth to newer flows.
	if w < c.wLastMax {
		c.wLastMax = w
		c.wMax = w * (1 + cubicBeta) / 2
	} else {
		c.wLastMax = w
		c.wMax = w
	}
	reduced := w * cubicBeta
	c.start(reduced, now)
	return int(reduced)
}

// start begins an epoch at window w.
func (c *cubic) start(w float64, now int64) {
	c.epoch = now
	c.cwndEpoch = w
	c.wEst = w
	if c.wMax < w {
		c.wMax = w
	}
	c.k = math.Cbrt((c.wMax - w) / cubicC)
}

// increase is how many packets the window of cwnd should grow by over the
// next round trip of rtt ns, at now, once acked more packets have been
// acknowledged: the larger of the curve's target one round trip ahead and
// Reno's estimate, less the window, at most half the window (RFC 9438,
// 4.2 to 4.4). An epoch that begins with no congestion event (entering
// competition) takes its window for wMax: the curve starts flat there.
func (c *cubic) increase(cwnd, acked int, now, rtt int64) float64 {
	w := float64(cwnd)
	if c.epoch == 0 {
		c.start(w, now)
	}
	t := float64(now-c.epoch+rtt) / float64(time.Second)
	target := cubicC*math.Pow(t-c.k, 3) + c.wMax
	c.wEst += cubicAlpha * float64(acked) / w
	target = max(target, c.wEst)
	return min(max(target-w, 0), w/2)
}
