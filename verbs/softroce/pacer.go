package softroce

import "time"

// pacer spreads a window's packets over the round trip: a token bucket
// that fills at one packet per interval and holds at most a burst, the
// packets that take burstTime at the pacing rate (at least minBurst). So
// the udp link's batches leave paced, and no burst is larger than the
// rate allows over burstTime.
//
// The bucket holds burstTime even when that is many GSO batches. The
// requester waits for credit on the QP's runtime timer, which wakes an
// idle process about a millisecond late (on the device's fine clock with
// Config.FineClock, fineclock.go), and a bucket of one batch (32
// packets) lost the credit of the lateness: on a clean path, where the window and not
// the rate limits, it capped a flow at a batch per wake-up. With the
// fine clock a smaller bucket keeps its rate, but did not share better:
// a 250 µs bucket took 0.75 and 0.68 of a 100 Mbit/s link with a 2 ms
// queue from a TCP flow, where 1 ms took 0.66 and 0.67.
type pacer struct {
	interval int64 // ns per packet; 0: not paced
	credit   int64 // ns of sending earned and not spent
	last     int64 // when credit was last brought up to date
	burst    int64 // the most credit, in ns
	// quantum is the least credit a held sender waits for: paceQuantum
	// on the device's fine clock, 0 (one packet's) on runtime timers,
	// whose lateness batches the wake-ups anyway.
	quantum int64
}

const (
	// burstTime is the longest burst at the pacing rate: short enough for
	// a small queue (2 ms at 100 Mbit/s holds 25 kB), long enough for the
	// runtime's timer to wake the sender in time.
	burstTime = int64(1000 * time.Microsecond)
	// minBurst is the fewest packets the pacer lets go at once.
	minBurst = 2
	// paceQuantum is the least credit a paced sender waits for: half the
	// bucket, so that no credit is lost, in as few wake-ups as that
	// allows. On a veth with no bottleneck, where soft-RoCE over udp is
	// CPU-bound, 100 µs cost about 5-10% of goodput against the runtime
	// timer's millisecond (more wake-ups); 500 µs did not.
	paceQuantum = int64(500 * time.Microsecond)
)

// setInterval paces one packet per interval ns (0: not at all).
func (p *pacer) setInterval(interval int64) {
	p.interval = max(interval, 0)
	p.burst = max(burstTime, minBurst*p.interval)
	p.credit = min(p.credit, p.burst)
}

// refill brings the credit up to now.
func (p *pacer) refill(now int64) {
	if p.last == 0 {
		p.credit = p.burst
	} else if d := now - p.last; d > 0 {
		p.credit = min(p.credit+d, p.burst)
	}
	p.last = now
}

// timeUntilSend is how long the next packet must wait: 0 to send now.
func (p *pacer) timeUntilSend(now int64) int64 {
	if p.interval == 0 {
		return 0
	}
	if p.credit >= p.interval {
		return 0
	}
	p.refill(now)
	if p.credit >= p.interval {
		return 0
	}
	// On the fine clock, wait for the quantum's packets, not one: at a
	// high rate one packet's credit comes every few µs, and a wake-up
	// per packet would cost more than the packet.
	return min(max(p.interval, p.quantum), p.burst) - p.credit
}

// sent spends one packet's credit; a packet the pacer did not allow (a
// resend) may leave it in debt, which later packets wait for.
func (p *pacer) sent(now int64) {
	if p.interval == 0 {
		return
	}
	if p.credit < p.interval {
		p.refill(now)
	}
	p.credit -= p.interval
	if p.credit < -p.burst {
		p.credit = -p.burst
	}
}
