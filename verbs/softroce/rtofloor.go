package softroce

import "time"

// The floor under a selective-repeat QP's retransmission timeout adapts
// to late acknowledgements, as RFC 4015 (Eifel's response) lets TCP adapt
// its timeout after a spurious one. The RFC 6298 estimate follows the
// round trips that were measured, and Karn's rule leaves out the one
// that matters here: a stalled receiver or acknowledgement path (a
// descheduled process on a loaded host, a collection pause), whose
// packet was resent before its acknowledgement came. On a two-CPU host
// forwarding 1 Gbit/s between namespaces, the 2 ms floor fired about
// ten times a second on a lone flow that lost no packet, and each
// timeout resent the window not yet acknowledged (36,894 resends in
// 20 s, a third of them proved spurious).
//
// A timeout proves spurious when the peer reports (duplicate echoes) that
// every packet resent since, of those the timeout could resend, arrived
// twice. One real loss among them (20% random loss at MTU 1500 made
// most timeouts so) keeps the floor: there a higher floor only slowed the
// recovery, from 0.95× TCP's goodput to 0.17×. Each such timeout doubles
// the floor, from minRTO up to maxRTOFloor; the floor halves again for
// each rtoFloorDecay without one, so that a stall that passed does not
// slow the recovery of real tail losses for long. Timeouts whose resend
// was needed (real losses) leave the floor as it is.

const (
	// maxRTOFloor bounds the adapted floor.
	maxRTOFloor = int64(32 * time.Millisecond)
	// rtoFloorDecay is how long the floor keeps a doubling.
	rtoFloorDecay = int64(2 * time.Second)
)

// rtoFloor is the adaptive floor of a selective-repeat QP's timeout.
type rtoFloor struct {
	floor    int64 // ns; minRTO or more once a timeout proved spurious
	raisedAt int64 // when the floor last doubled or halved (ns)
}

// at is the floor at now.
func (f *rtoFloor) at(now int64) int64 {
	for f.floor > minRTO && now-f.raisedAt >= rtoFloorDecay {
		f.floor /= 2
		f.raisedAt += rtoFloorDecay
	}
	return max(f.floor, minRTO)
}

// spurious doubles the floor after a timeout that proved spurious at now.
func (f *rtoFloor) spurious(now int64) {
	f.floor = min(2*f.at(now), maxRTOFloor)
	f.raisedAt = now
}

// inTimeoutSpan reports whether psn lies among the PSNs the last timeout
// could resend.
func (c *completerState) inTimeoutSpan(psn uint32) bool {
	return psnDiff(psn, c.timeoutPSN) >= 0 && psnDiff(psn, c.timeoutEnd) < 0
}
