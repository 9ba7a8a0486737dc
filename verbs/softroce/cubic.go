package softroce

import (
	"math"
	"time"
)

// cubic is CUBIC's window function (RFC 9438), which the congestion
// controller follows while it competes with a flow that fills queues
// (congestion.go). Linux's TCP runs CUBIC by default, so a flow that
// answers the same losses with the same window function takes about the
// same share of a bottleneck as a TCP flow does: Reno's additive increase
// (the "TCP-friendly" estimate) where windows are small or round trips
// short, the cubic curve where windows are large and loss is rare. Pure
// state: windows in packets, times in monotonic ns.
type cubic struct {
	wMax      float64 // the window before the last reduction
	wLastMax  float64 // wMax before that, for fast convergence
	k         float64 // seconds from the epoch's start until the curve is back at wMax
	epoch     int64   // when the current epoch (the time since the last reduction) began; 0 none
	wEst      float64 // Reno's window estimate over the epoch (RFC 9438, 4.3)
	cwndEpoch float64 // the window the epoch began at
}

const (
	// cubicBeta is the window kept after a congestion event (RFC 9438's
	// β_cubic).
	cubicBeta = 0.7
	// cubicC scales the curve (RFC 9438's C, in packets per second³).
	cubicC = 0.4
	// cubicAlpha is the TCP-friendly estimate's increase per round trip
	// that matches Reno's throughput with a decrease of cubicBeta
	// (RFC 9438: 3(1−β)/(1+β)). RFC 9438 raises it to 1 once the
	// estimate passes wMax; Linux's tcp_cubic keeps it, and Linux's
	// CUBIC is the flow this one shares a queue with.
	cubicAlpha = 3 * (1 - cubicBeta) / (1 + cubicBeta)
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
