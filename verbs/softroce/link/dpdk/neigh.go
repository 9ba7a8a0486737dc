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
)

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
	confirmed time.Time
	asked     time.Time
}

// neighTable maps next-hop IP addresses to MACs. It is a pure state
// type: the caller passes the time and sends the requests it asks for,
// and locks it.
type neighTable struct {
	m map[netip.Addr]*neighbour
}

func newNeighTable() *neighTable {
	return &neighTable{m: make(map[netip.Addr]*neighbour)}
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

// ask reports whether a request for ip is due at now, and records it.
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
	n.asked = now
	return true
}

// learn records that ip is at mac, as of now. With update only, it
// changes an existing entry and does not create one (what a request to
// someone else teaches, RFC 826's merge flag).
func (t *neighTable) learn(ip netip.Addr, mac wire.MAC, now time.Time, update bool) {
	ip = ip.Unmap()
	n := t.m[ip]
	if n == nil {
		if update {
			return
		}
		t.makeRoom(now)
		n = &neighbour{}
		t.m[ip] = n
	}
	if n.static {
		return
	}
	n.mac, n.known, n.confirmed = mac, true, now
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
