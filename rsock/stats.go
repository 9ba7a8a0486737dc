package rsock

import "github.com/rsock-go/rsock/verbs"

// Stats describes a stream for monitoring: bytes each way, why writers
// waited, and its queue pair's state and counters.
type Stats struct {
	// BytesRead is what Read returned; BytesWritten what Write accepted
	// (handed to the queue pair, not necessarily acknowledged).
	BytesRead, BytesWritten uint64
	// CreditStalls counts the times a writer waited for the peer: its
	// receive ring full, or its receive requests all taken, until it
	// returns credits.
	CreditStalls uint64
	// SendRingStalls counts the times a writer waited for its own send
	// ring to drain (writes not yet acknowledged).
	SendRingStalls uint64
	// RingSize is the size in bytes of the stream's receive ring (and of
	// its send ring).
	RingSize int
	// QP is the queue pair's statistics, when the device reports them
	// (verbs.StatsQP); the zero value otherwise.
	QP verbs.QPStats
}

// stalls counts the waits of writers. Guarded by Stream.mu.
type stalls struct {
	credit, sendRing uint64
}

// noteStall counts a writer about to wait; sendFree is the free space of
// the send ring. The caller holds s.mu.
func (s *Stream) noteStall(sendFree int) {
	if sendFree == 0 {
		s.stalls.sendRing++
	} else {
		s.stalls.credit++
	}
}

// Stats returns the stream's statistics: its own under its lock, then the
// queue pair's under the queue pair's. It does not allocate.
func (s *Stream) Stats() Stats {
	s.mu.Lock()
	st := Stats{
		BytesRead:      s.cons.ReadCursor(),
		BytesWritten:   s.prod.Written(),
		CreditStalls:   s.stalls.credit,
		SendRingStalls: s.stalls.sendRing,
		RingSize:       s.e.recv.Size(),
	}
	s.mu.Unlock()
	if q, ok := s.e.qp.(verbs.StatsQP); ok {
		st.QP = q.Stats()
	}
	return st
}
