package shm

import (
	"sync"
	"time"
)

// How long a waiter polls the rings before it sleeps on the doorbell.
// Sleeping costs both sides: the peer's doorbell write wakes a sleeping
// thread (an inter-processor interrupt, several microseconds on a VM) and
// the sleeper pays the netpoller's wake-up. When the answer comes soon (a
// request-response service with one caller, a ping-pong) polling for it
// is several times faster. When it does not (an idle connection, a busy
// peer, or a peer that needs the very CPU the poller holds) polling only
// burns CPU, and can delay the answer it waits for. spinPolicy learns
// which from the waits it sees.
const (
	spinMin = 2 * time.Microsecond  // always poll this long
	spinMax = 50 * time.Microsecond // never poll longer

	// spinBackoffMax bounds the backoff after failed polls: at worst one
	// wait in 2^spinBackoffMax polls longer than spinMin, in vain.
	spinBackoffMax = 6
)

// spinPolicy is the poll budget of one completion queue: pure state, safe
// for concurrent use; the zero value polls spinMin.
//
//   - A wait that ends while polling was worth it: the budget stays.
//   - A wait that had to sleep but ended within spinMax would have
//     ended while polling: the next one polls twice as long as it took,
//     unless a backoff is running.
//   - A wait that polled longer than spinMin in vain (it slept after)
//     starts a backoff: the next 2, 4, ... 64 waits poll only spinMin.
//     A peer that is slow, or that shares our CPU (so that polling keeps
//     it from running), thus costs at most one long poll in 64 waits.
type spinPolicy struct {
	mu      sync.Mutex
	budget  time.Duration // what the next wait polls, outside a backoff
	skip    int           // waits left in the current backoff
	backoff int           // log2 of the next backoff's length
}

// Begin returns how long a starting wait polls.
func (p *spinPolicy) Begin() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.skip > 0 {
		p.skip--
		return spinMin
	}
	return max(p.budget, spinMin)
}

// End records a wait that polled for budget (from Begin) and lasted
// waited in all; slept says whether it went to sleep.
func (p *spinPolicy) End(budget, waited time.Duration, slept bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !slept:
		p.backoff = 0
	case budget > spinMin:
		// Polled long, in vain.
		p.budget = spinMin
		p.backoff = min(p.backoff+1, spinBackoffMax)
		p.skip = 1<<p.backoff - 1
	case waited <= spinMax && p.skip == 0:
		p.budget = min(2*waited, spinMax)
	}
}
