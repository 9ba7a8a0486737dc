package dpdk

import (
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Neighbour table timing, as Linux's defaults roughly are.
const (
	// reachableTime is how long a confirmed entry is used without asking.
	reachableTime = 30 * time.Second
	// staleTime is how long after reachableTime a stale entry is still
	// used while it is being re-resolved; after it the entry is dropped.
	staleTime = 5 * time.Second
	// retransTime is the interval between requests for one address.
	retransTime = 200 * time.Millisecond
	// maxNeighbours bounds the table; the least recently confirmed entry
	// makes room.
	maxNeighbours = 256
	// answerWindow is how long after our last request for an address a
	// reply or solicited advertisement for it is taken.
	answerWindow = time.Second
)

// Rate limits of the ARP and neighbour discovery frames the link takes
// (learns from or answers) and of the replies it sends, so that a flood
// of them costs a bounded amount of work and provokes a bounded amount of
// traffic; the rest is dropped.
const (
	takeRate, takeBurst   = 200, 50 // frames per second
	replyRate, replyBurst = 100, 20
)

// tokenBucket allows rate events a second on average, burst at once. It
// is pure state: the caller passes the time.
type tokenBucket struct {
	rate, burst, tokens int
	last                time.Time
}

// allow reports whether an event at now is within the rate, and counts it.
func (b *tokenBucket) allow(now time.Time) bool {
	switch el := now.Sub(b.last); {
	case b.last.IsZero() || el >= time.Second:
		b.tokens, b.last = b.burst, now
	case el > 0:
		if add := int(el * time.Duration(b.rate) / time.Second); add > 0 {
			b.tokens = min(b.burst, b.tokens+add)
			b.last = b.last.Add(time.Duration(add) * time.Second / time.Duration(b.rate))
		}
	}
	if b.tokens == 0 {
		return false
	}
	b.tokens--
	return true
}

// neighState is what lookup found.
type neighState uint8

const (
	// neighNone: no usable entry; resolve the address.
	neighNone neighState = iota
	// neighReachable: the MAC was confirmed within reachableTime.
	neighReachable
	// neighStale: the MAC is usable, but should be confirmed again.
	neighStale
)

// neighbour is one entry: an IP address's MAC, if known, and when it
// was last confirmed and last asked for.
type neighbour struct {
	mac       wire.MAC
	known     bool
	static    bool
	pending   bool // our request awaits its answer
	confirmed time.Time
	asked     time.Time
}

// neighTable maps next-hop IP addresses to MACs. It is a pure state
// type: the caller passes the time and sends the requests it asks for,
// and locks it.
//
// Only an answer to a request of ours makes or changes an entry (answer);
// anything unsolicited (a gratuitous ARP, a request, an unsolicited
// advertisement) may only confirm an entry already known with the same
// MAC, and one that names another MAC makes the entry stale, so that it
// is asked for again (refresh). Entries are made only by ask, for the
// addresses the link sends to.
type neighTable struct {
	m map[netip.Addr]*neighbour
	// take limits the ARP and neighbour discovery frames taken, replies
	// the replies sent.
	take, replies tokenBucket
}

func newNeighTable() *neighTable {
	return &neighTable{m: make(map[netip.Addr]*neighbour),
		take:    tokenBucket{rate: takeRate, burst: takeBurst},
		replies: tokenBucket{rate: replyRate, burst: replyBurst}}
}

// setStatic adds an entry that never expires.
func (t *neighTable) setStatic(ip netip.Addr, mac wire.MAC) {
	t.m[ip.Unmap()] = &neighbour{mac: mac, known: true, static: true}
}

// lookup returns ip's MAC and its state at now. With neighNone or
// neighStale the caller should send a request if ask reports one due
// (at most one per retransTime per address).
func (t *neighTable) lookup(ip netip.Addr, now time.Time) (wire.MAC, neighState) {
	n := t.m[ip.Unmap()]
	switch {
	case n == nil || !n.known:
		return wire.MAC{}, neighNone
	case n.static || now.Sub(n.confirmed) < reachableTime:
		return n.mac, neighReachable
	case now.Sub(n.confirmed) < reachableTime+staleTime:
		return n.mac, neighStale
	}
	return wire.MAC{}, neighNone
}

// ask reports whether a request for ip is due at now, and records it:
// an answer is then awaited (see answer).
func (t *neighTable) ask(ip netip.Addr, now time.Time) bool {
	ip = ip.Unmap()
	n := t.m[ip]
	if n == nil {
		t.makeRoom(now)
		n = &neighbour{}
		t.m[ip] = n
	}
	if n.static || (!n.asked.IsZero() && now.Sub(n.asked) < retransTime) {
		return false
	}
	n.asked, n.pending = now, true
	return true
}

// answer takes an answer (an ARP reply to us, a solicited advertisement)
// that ip is at mac, as of now, if a request of ours for ip awaits one
// (asked within answerWindow); it reports whether it was taken. The first
// answer ends the wait: later ones are not answers.
func (t *neighTable) answer(ip netip.Addr, mac wire.MAC, now time.Time) bool {
	n := t.m[ip.Unmap()]
	if n == nil || n.static || !n.pending || now.Sub(n.asked) >= answerWindow || now.Before(n.asked) {
		return false
	}
	n.mac, n.known, n.pending, n.confirmed = mac, true, false, now
	return true
}

// refresh takes an unsolicited claim that ip is at mac, as of now: it
// confirms a known entry with that MAC, and makes a known entry with
// another one stale (still used, and asked for again), never changes a
// MAC and never makes an entry.
func (t *neighTable) refresh(ip netip.Addr, mac wire.MAC, now time.Time) {
	n := t.m[ip.Unmap()]
	if n == nil || n.static || !n.known {
		return
	}
	if mac == n.mac {
		if now.After(n.confirmed) {
			n.confirmed = now
		}
		return
	}
	if stale := now.Add(-reachableTime); n.confirmed.After(stale) {
		n.confirmed = stale
	}
}

// makeRoom drops expired entries, and the oldest one if the table is
// still full.
func (t *neighTable) makeRoom(now time.Time) {
	if len(t.m) < maxNeighbours {
		return
	}
	var oldest netip.Addr
	var oldestAt time.Time
	for ip, n := range t.m {
		if n.static {
			continue
		}
		at := n.confirmed
		if !n.known {
			at = n.asked
		}
		if now.Sub(at) >= reachableTime+staleTime {
			delete(t.m, ip)
			continue
		}
		if !oldest.IsValid() || at.Before(oldestAt) {
			oldest, oldestAt = ip, at
		}
	}
	if len(t.m) >= maxNeighbours && oldest.IsValid() {
		delete(t.m, oldest)
	}
}
