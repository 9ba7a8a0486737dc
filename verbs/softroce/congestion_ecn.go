package softroce

// The controller's reaction to ECN marks (between rsock peers that
// negotiated ECN; see ecn_qp.go): DCTCP's (RFC 8257). A queue that marks
// CE above a threshold says how much of the flow's traffic found it over
// that threshold; the controller keeps alpha, a moving average (gain
// 1/16) of the share of each round trip's packets that were marked, and
// in a round trip with marks shrinks the window by alpha/2: by half when
// every packet was marked for a while, by little when a few were. So a
// flow alone at a marking queue holds it near the threshold without a
// loss, and the window moves smoothly instead of halving.
//
// The reduction is at most once per round trip, and not in the round
// trip after any reduction (the marks of packets sent before it took
// effect answer for the same congestion), as for loss and delay.

// ecnGain is DCTCP's g, the weight of a round trip's marked share in
// alpha.
const ecnGain = 1.0 / 16

// ecnReaction is the DCTCP state of a delayGated controller.
type ecnReaction struct {
	alpha  float64 // the marked share's moving average; 1 until marks say otherwise
	marked int     // packets reported CE-marked in the current round trip
}

// newECNReaction starts alpha at 1, as Linux's DCTCP does: the first
// marks halve the window, as a loss would.
func newECNReaction() ecnReaction { return ecnReaction{alpha: 1} }

// OnECNMarks counts n packets the peer reported CE-marked. Marks end slow
// start at once, as an ECE does TCP's: the window stops doubling now, and
// the cut follows at the round trip's end. (Waiting for the round's end
// let slow start double the window through a round trip that the
// growing queue made 20 ms long, and a flow starting at a 100 Mbit/s
// bottleneck overflowed its 20 ms queue before its first cut.)
func (c *delayGated) OnECNMarks(n int) {
	if n <= 0 {
		return
	}
	c.ecn.marked += n
	c.ssthresh = min(c.ssthresh, c.cwnd)
}

// endRound folds a round trip of acked packets into alpha and returns
// the window DCTCP leaves of cwnd: cwnd × (1 − alpha/2) (at least a
// packet less) if the round had marks, else cwnd.
func (e *ecnReaction) endRound(acked, cwnd int) int {
	marked := e.marked
	e.marked = 0
	if marked == 0 && acked == 0 {
		return cwnd // nothing acknowledged or marked: no evidence either way
	}
	f := 1.0
	if acked > marked {
		f = float64(marked) / float64(acked)
	}
	e.alpha += ecnGain * (f - e.alpha)
	if marked == 0 {
		return cwnd
	}
	return cwnd - max(int(float64(cwnd)*e.alpha/2), 1)
}
