package netconn

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rsock-go/rsock/fallback"
)

// Handshake slots under pressure: a dialer that finds every slot taken
// may end a stalled handshake of a source holding more slots than its
// own, once that handshake has waited shedAge for its dialer to confirm
// (a real one confirms within a round trip and its queue pair's setup).
// The dialer looks again every shedRetry while it waits.
const (
	shedAge   = 500 * time.Millisecond
	shedRetry = 50 * time.Millisecond
)

// handshakeSlots bounds a listener's rsock handshakes in progress (each
// holds a queue pair and rings) and shares the slots among sources when
// they run out: no source keeps more than another wants to use.
type handshakeSlots struct {
	ch   chan struct{} // one per slot taken
	wait time.Duration // how long a dialer waits for a slot

	mu       sync.Mutex
	holders  map[net.Conn]*slotHolder // handshakes in negotiation
	bySource map[netip.Prefix]int     // slots held, by source
}

// slotHolder is a handshake holding a slot.
type slotHolder struct {
	src   netip.Prefix // zero for a remote address that is not IP
	since time.Time
	shed  bool        // closed for another source, or done negotiating
	heir  *slotWaiter // who gets the slot when it is shed
}

func newHandshakeSlots(n int, wait time.Duration) *handshakeSlots {
	return &handshakeSlots{
		ch:       make(chan struct{}, n),
		wait:     wait,
		holders:  make(map[net.Conn]*slotHolder),
		bySource: make(map[netip.Prefix]int),
	}
}

// size is the number of slots.
func (s *handshakeSlots) size() int { return cap(s.ch) }

// sourceKey is the source of c for sharing the slots.
func sourceKey(c net.Conn) netip.Prefix {
	p, _ := fallback.SourceOf(c.RemoteAddr())
	return p
}

// slotWaiter is a dialer waiting for a slot, to which the slot of the
// handshake it shed passes.
type slotWaiter struct {
	granted chan struct{} // receives the shed handshake's slot
	heir    bool          // a shed handshake will pass its slot on
	gone    bool          // no longer waiting
}

// take waits for a slot for c's handshake, up to s.wait or until done is
// closed, and reports whether it got one. While it waits it sheds a
// stalled handshake of a source holding more slots than c's, whose slot
// then passes to it (not to whoever is quickest).
func (s *handshakeSlots) take(c net.Conn, done <-chan struct{}) bool {
	src := sourceKey(c)
	select {
	case s.ch <- struct{}{}:
		s.hold(c, src)
		return true
	default:
	}
	timeout := time.NewTimer(s.wait)
	defer timeout.Stop()
	retry := time.NewTicker(shedRetry)
	defer retry.Stop()
	w := &slotWaiter{granted: make(chan struct{}, 1)}
	got := false
loop:
	for {
		if victim := s.victim(src, w, time.Now()); victim != nil {
			victim.Close() // its negotiation fails and passes the slot on
		}
		select {
		case s.ch <- struct{}{}:
			got = true
			break loop
		case <-w.granted:
			got = true
			break loop
		case <-retry.C:
		case <-timeout.C:
			break loop
		case <-done:
			break loop
		}
	}
	s.mu.Lock()
	w.gone = true
	select {
	case <-w.granted: // a slot passed on meanwhile
		if got {
			s.mu.Unlock()
			<-s.ch // one is enough
			s.mu.Lock()
		}
		got = true
	default:
	}
	s.mu.Unlock()
	if got {
		s.hold(c, src)
	}
	return got
}

func (s *handshakeSlots) hold(c net.Conn, src netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holders[c] = &slotHolder{src: src, since: time.Now()}
	s.bySource[src]++
}

// settle marks c's negotiation as over: it is not shed any more, though
// it keeps its slot until release.
func (s *handshakeSlots) settle(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.holders[c]; h != nil {
		h.shed = true // not a candidate any more
	}
}

// release gives back c's slot, or passes it to the dialer that shed c.
func (s *handshakeSlots) release(c net.Conn) {
	s.mu.Lock()
	if h := s.holders[c]; h != nil {
		delete(s.holders, c)
		if s.bySource[h.src]--; s.bySource[h.src] <= 0 {
			delete(s.bySource, h.src)
		}
		if w := h.heir; w != nil && !w.gone {
			w.granted <- struct{}{}
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	<-s.ch
}

// victim picks the handshake to shed for w, a dialer from src that waits
// for no other: among the handshakes negotiating for at least shedAge
// whose source holds more slots than src, one of the source holding most,
// the oldest of it. It marks it for w and returns its connection, or nil
// if there is none.
func (s *handshakeSlots) victim(src netip.Prefix, w *slotWaiter, now time.Time) net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.heir {
		return nil
	}
	mine := s.bySource[src]
	var (
		pick  net.Conn
		pickH *slotHolder
	)
	for c, h := range s.holders {
		if h.shed || now.Sub(h.since) < shedAge || s.bySource[h.src] <= mine {
			continue
		}
		if pickH == nil || s.bySource[h.src] > s.bySource[pickH.src] ||
			s.bySource[h.src] == s.bySource[pickH.src] && h.since.Before(pickH.since) {
			pick, pickH = c, h
		}
	}
	if pickH == nil {
		return nil
	}
	pickH.shed = true
	pickH.heir = w
	w.heir = true
	return pick
}
